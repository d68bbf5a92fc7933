package sandbox

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

// The scan of /proc that stands in for the children file on kernels without it finds a child of this
// test process, and procParent reads its parent and its PID (here in the test's own namespace). The
// children file itself is what TestTerminateFindsProgramAmongOrphans uses.
func TestScanChildrenFindsAChild(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	me, kid := os.Getpid(), cmd.Process.Pid
	if got := scanChildren(me); !slices.Contains(got, kid) {
		t.Fatalf("scanChildren(%d) = %v, want %d among them", me, got, kid)
	}
	ppid, inner, ok := procParent(kid)
	if !ok || ppid != me || inner != kid {
		t.Fatalf("procParent(%d) = %d, %d, %v; want %d, %d, true", kid, ppid, inner, ok, me, kid)
	}
	if _, _, ok := procParent(1 << 30); ok {
		t.Fatal("procParent of a PID that cannot exist answered")
	}
}
