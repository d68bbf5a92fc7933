package sandbox

import (
	"strings"
	"syscall"
	"testing"

	"github.com/codellm/codellm/internal/sandbox/landlock"
)

// Every probed facility has its line in the report, present on this host.
func TestFeaturesAreProbed(t *testing.T) {
	rep := nativeSandbox(t).Report()
	for _, name := range append(featureOrder, "CLONE_INTO_CGROUP", "landlock ABIs") {
		f := feature(t, rep, name)
		if f.Detail == "" {
			t.Errorf("%s: no detail", name)
		}
		if name != "CLONE_INTO_CGROUP" && !f.Available {
			t.Errorf("%s missing on this host: %s", name, f.Detail)
		}
	}
	if !strings.Contains(rep.String(), "feature: close_range: yes: the raw helper") {
		t.Errorf("doctor's table lacks the close_range line:\n%s", rep.String())
	}
}

// Each probed facility, faked missing, is named in doctor's table with the
// errno and what codellm does without it.
func TestEachMissingFeatureIsNamed(t *testing.T) {
	for _, name := range featureOrder {
		t.Run(name, func(t *testing.T) {
			real := probeFeature[name]
			t.Cleanup(func() { probeFeature[name] = real })
			probeFeature[name] = func() error { return syscall.ENOSYS }
			s, err := New(Config{Mode: ModeNative})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := "feature: " + name + ": no: missing (ENOSYS): " + featureRoles[name][1]
			if !strings.Contains(s.Report().String(), want) {
				t.Errorf("doctor's table lacks %q:\n%s", want, s.Report().String())
			}
		})
	}
}

// A faked missing clone3 keeps helpers out of CLONE_INTO_CGROUP, and on
// cgroup v2 the raw helper off; doctor says what codellm does instead.
func TestMissingClone3IsNamed(t *testing.T) {
	real := probeFeature[featClone3]
	t.Cleanup(func() { probeFeature[featClone3] = real })
	probeFeature[featClone3] = func() error { return syscall.ENOSYS }
	s, err := New(Config{Mode: ModeNative})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := feature(t, s.Report(), featClone3)
	if f.Available || !strings.Contains(f.Detail, "ENOSYS") || !strings.Contains(f.Detail, "moves each helper into its cgroup") {
		t.Errorf("clone3 line %+v", f)
	}
	if !s.plat.noClone3 {
		t.Error("helpers would still be cloned into their cgroup")
	}
	if v2 := s.plat.cg != nil && s.plat.cg.Info().Version == 2; v2 != (s.plat.rawOff != "") {
		t.Errorf("cgroup v2 %v, raw helper off %q: want off exactly on v2", v2, s.plat.rawOff)
	}
	if f := feature(t, s.Report(), "CLONE_INTO_CGROUP"); f.Available {
		t.Errorf("CLONE_INTO_CGROUP line %+v: want not used", f)
	}
}

// The Landlock line names each ABI with what it gives, which this kernel
// lacks, which codellm uses and that native needs ABI 1.
func TestLandlockStatusNamesEachABI(t *testing.T) {
	if len(landlockGives)-1 != landlock.MaxABI {
		t.Fatalf("landlockGives covers ABIs 1..%d, codellm asks for up to %d: say what the new one gives", len(landlockGives)-1, landlock.MaxABI)
	}
	st := landlockStatus(3)
	for _, want := range []string{"uses ABI 3", "native needs 1", "2 renames and links", "lacks 4 TCP bind and connect rules", "6 signal and abstract Unix socket scoping"} {
		if !strings.Contains(st.Detail, want) {
			t.Errorf("ABI 3: %q lacks %q", st.Detail, want)
		}
	}
	if st := landlockStatus(0); st.Available || !strings.Contains(st.Detail, "native needs ABI 1") {
		t.Errorf("ABI 0: %+v", st)
	}
	if st := landlockStatus(99); !strings.Contains(st.Detail, "uses ABI 7") || strings.Contains(st.Detail, "lacks") {
		t.Errorf("ABI 99: %+v", st)
	}
}
