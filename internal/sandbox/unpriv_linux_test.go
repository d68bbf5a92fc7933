package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/codellm/codellm/internal/testhelp"
)

const unprivChildEnv = "CODELLM_SANDBOX_UNPRIV_CHILD"

// TestUnprivileged runs this test binary as uid 65534 (no capabilities at
// all) and checks, from there, that the sandbox works for an unprivileged
// codellm: the user namespace maps the single uid it owns, mounts and
// pivot_root work inside, Persist binds by path. Cgroups are normally not
// writable for such a user on a v1 host, so native must refuse naming
// "cgroup" while besteffort runs.
func TestUnprivileged(t *testing.T) {
	if os.Getenv(unprivChildEnv) == "1" {
		unprivilegedChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: the rest of the suite covers this case")
	}
	nativeSandbox(t) // skips/fails consistently when the host has no sandbox
	out, err := testhelp.RunAsNobody(t, "^TestUnprivileged$", unprivChildEnv+"=1")
	if err != nil || !strings.Contains(out, "--- PASS: TestUnprivileged") {
		t.Fatalf("unprivileged child: %v\n%s", err, out)
	}
	t.Logf("unprivileged child:\n%s", out)
}

func unprivilegedChild(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Fatal("child still root")
	}
	be, err := New(Config{Mode: ModeBestEffort})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rep := be.Report()
	t.Logf("besteffort report as uid %d:\n%s", os.Geteuid(), rep.String())
	for _, m := range []string{MechUserNS, MechPIDNS, MechMountNS, MechRootFS, MechLandlock, MechSeccomp} {
		for _, st := range rep.Mechanisms {
			if st.Name == m && !st.Used {
				t.Fatalf("unprivileged: %s not used: %s", m, st.Detail)
			}
		}
	}
	o := mustRun(t, be, sh("id -u; hostname; touch /etc/x 2>/dev/null || echo ro; cat /etc/shadow 2>/dev/null || echo noshadow; cat /proc/1/comm")...)
	want := "1000 codellm ro noshadow codellm-raw"
	fields := strings.Fields(o.Stdout)
	if goHelperForTests && len(fields) == 5 {
		want = "1000 codellm ro noshadow " + fields[4] // the Go helper, exec'd as /proc/self/fd/N
	}
	if strings.Join(fields, " ") != want {
		t.Fatalf("unprivileged probe: %+v, want %q (the raw helper serves an unprivileged codellm's blocks too)", o, want)
	}
	// Persist: a bind by path, done by the helper itself.
	dir := workdir(t, map[string]string{"in": "x"})
	r, err := be.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	p, err := r.Start(Spec{Path: "/bin/sh", Args: sh("cp in out"), Dir: dir, Persist: true, Stdout: null, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	if res := p.Wait(); res.ExitCode != 0 {
		t.Fatalf("persist: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err != nil {
		t.Fatalf("persist write not visible: %v", err)
	}
	// Collect: the server reads the held namespace's private workdir through /proc/<init>/root, although
	// the init is non-dumpable: the server owns the block's user namespace.
	var got []byte
	cr, err := be.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	cp, err := cr.Start(Spec{Path: "/bin/sh", Args: sh("echo held > h"), Dir: workdir(t, nil), MountAt: "/work", Stdout: null, Stderr: null,
		Collect: func(root string) (err error) { got, err = os.ReadFile(root + "/h"); return err }})
	if err != nil {
		t.Fatal(err)
	}
	if res := cp.Wait(); !res.Collected || res.CollectErr != nil || string(got) != "held\n" {
		t.Fatalf("collect unprivileged: %+v, read %q", res, got)
	}
	// Terminate: codellm finds the program under the init (its /proc files, a pidfd) and signals it.
	tr, err := be.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if res, _ := terminateBlock(t, tr); res.Signal != syscall.SIGTERM {
		t.Fatalf("terminate unprivileged: %+v, want the program killed by SIGTERM", res)
	}
	nat, err := New(Config{Mode: ModeNative})
	if err != nil {
		t.Fatal(err)
	}
	if nat.Report().Ready {
		t.Logf("native is ready unprivileged (delegated cgroup): running a block")
		mustRun(t, nat, "/bin/true")
		return
	}
	nr, err := nat.NewRun(nil)
	if err == nil {
		_, err = nr.Start(Spec{Path: "/bin/true", Args: []string{"true"}, Dir: workdir(t, nil), Stdout: null, Stderr: null})
		nr.Close()
	}
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Mechanism == "" || ue.Fix == "" {
		t.Fatalf("native without %v: err %v, want an UnavailableError naming the mechanism", nat.Report().Missing, err)
	}
	t.Logf("native refused as expected: %v", err)
}
