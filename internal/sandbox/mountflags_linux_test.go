package sandbox

import (
	"strings"
	"testing"
)

// TestD_MountFlags reads the block's /proc/self/mountinfo and checks the
// flags each mount of the root gets (set by mount_setattr where the kernel
// has it, by statfs + remount before 5.12): the root and the system binds
// read-only, nosuid and nodev; the /dev nodes nosuid and noexec but
// writable; the workdir, /tmp and /dev/shm writable, nosuid and nodev.
func TestD_MountFlags(t *testing.T) {
	s := nativeSandbox(t)
	dir := workdir(t, nil)
	o, err := runIn(t, s, dir, nil, "/bin/cat", "/proc/self/mountinfo")
	if err != nil || o.ExitCode != 0 {
		t.Fatalf("cat mountinfo: %v %+v", err, o)
	}
	opts := map[string]map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(o.Stdout), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("mountinfo line %q", line)
		}
		m := map[string]bool{}
		for _, o := range strings.Split(f[5], ",") {
			m[o] = true
		}
		opts[f[4]] = m // a later mount on the same point is the visible one
	}
	want := func(point string, flags ...string) {
		t.Helper()
		m, ok := opts[point]
		if !ok {
			t.Fatalf("no mount on %s in\n%s", point, o.Stdout)
		}
		for _, fl := range flags {
			if !m[fl] {
				t.Errorf("%s: want %s, have %v", point, fl, m)
			}
		}
	}
	want("/", "ro", "nosuid", "nodev")
	want("/tmp", "rw", "nosuid", "nodev")
	want("/dev/shm", "rw", "nosuid", "nodev")
	want("/dev/null", "rw", "nosuid", "noexec")
	want(dir, "rw", "nosuid", "nodev")
	want("/proc", "ro", "nosuid", "nodev", "noexec")
	system := 0
	for point := range opts {
		top, rest, _ := strings.Cut(strings.TrimPrefix(point, "/"), "/")
		isSys := rest == "" && (top == "usr" || top == "bin" || top == "sbin" || strings.HasPrefix(top, "lib"))
		isEtc := top == "etc" && rest != "" && !strings.Contains(rest, "/")
		if isSys || isEtc {
			system++
			want(point, "ro", "nosuid", "nodev")
		}
	}
	if _, ok := opts["/usr"]; !ok || system < 2 {
		t.Fatalf("want /usr and /etc entries bound, have %d system mounts in\n%s", system, o.Stdout)
	}
}
