package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
	"golang.org/x/sys/unix"
)

func TestRunGroupOwner(t *testing.T) {
	for name, want := range map[string]int{
		"codellm-123-9f661859-4":        123,
		"codellm-probe-77-0123abcd-1":   77,
		"codellm-4456-4":                4456,
		"codellm-4194304-deadbeef-1":    4194304,
		"codellm-4194305-deadbeef-1":    0, // above PID_MAX_LIMIT
		"codellm-0-9f661859-4":          0,
		"codellm-0123-9f661859-4":       0,
		"codellm--9f661859-4":           0,
		"codellm-123-9F661859-4":        0, // instanceID is lowercase
		"codellm-123-9f66185-4":         0,
		"codellm-123-9f661859-0":        0,
		"codellm-123-9f661859-4-x":      0,
		"codellm-123-9f661859":          0, // <pid>-<seq> needs a decimal seq
		"codellm-probe-77-1":            0,
		"codellm-123":                   0,
		"codellm-test-abc":              0,
		"codellm-runner-123":            0,
		"xcodellm-123-9f661859-4":       0,
		"codellm-123-9f661859-4 ":       0,
		"codellm-+123-9f661859-4":       0,
		"supervisor":                    0,
		"codellm-123-9f661859-12345678": 123,
	} {
		pid, ok := runGroupOwner(name)
		if ok != (want != 0) || pid != want {
			t.Errorf("runGroupOwner(%q) = %d, %v; want %d", name, pid, ok, want)
		}
	}
}

func deadPid(t testing.TB) int {
	t.Helper()
	for range 20 {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatalf("run true: %v", err)
		}
		if pid := cmd.Process.Pid; unix.Kill(pid, 0) == unix.ESRCH {
			return pid
		}
	}
	t.Fatal("could not find a pid that no live process holds")
	return 0
}

// TestNewSweepsStaleRunGroups: New removes the run group (and its block
// child) of a dead codellm pid, kills what one of a dead pid still holds
// and removes it too (issue 35 item 7: such processes are a dead server's
// blocks, left frozen when it died killing them), and keeps one of a live
// pid and one whose name is not codellm's.
func TestNewSweepsStaleRunGroups(t *testing.T) {
	h, err := cgroup.Detect()
	if err != nil {
		skipOrFail(t, "no usable cgroups on this host: %v", err)
	}
	mk := func(name string) (*cgroup.Group, *cgroup.Group) {
		t.Helper()
		g, err := h.NewGroup(name, cgroup.Limits{})
		if err != nil {
			t.Fatalf("NewGroup %s: %v", name, err)
		}
		t.Cleanup(func() {
			if err := g.Remove(); err != nil {
				t.Errorf("cleanup %s: %v", name, err)
			}
		})
		c, err := g.NewChild("block-1")
		if err != nil {
			t.Fatalf("NewChild: %v", err)
		}
		return g, c
	}
	dead := deadPid(t)
	id := randomID(t)
	staleG, staleC := mk(fmt.Sprintf("codellm-%d-%s-1", dead, id))
	liveG, _ := mk(fmt.Sprintf("codellm-%d-%s-1", os.Getpid(), id))
	busyG, busyC := mk(fmt.Sprintf("codellm-%d-%s-2", dead, id))
	otherG, _ := mk(fmt.Sprintf("codellmx-%d-%s-1", dead, id))

	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	slept := make(chan struct{})
	go func() { _ = sleep.Wait(); close(slept) }()
	defer func() { _ = sleep.Process.Kill(); <-slept }()
	if err := busyC.Add(sleep.Process.Pid); err != nil {
		t.Fatalf("add sleep: %v", err)
	}

	isDir := func(p string) bool {
		fi, err := os.Lstat(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("lstat %s: %v", p, err)
		}
		return err == nil && fi.IsDir()
	}
	// Another package's test binary starting a Sandbox at this moment sweeps the stale group as well
	// (go test runs packages in parallel, and it is a dead codellm's group to every process): make it again.
	for try := 0; !isDir(staleG.Path()) || !isDir(staleC.Path()); try++ {
		if try == 5 {
			t.Fatalf("stale group keeps disappearing before New: %s", staleG.Path())
		}
		dead, id = deadPid(t), randomID(t)
		staleG, staleC = mk(fmt.Sprintf("codellm-%d-%s-1", dead, id))
	}
	if _, err := New(Config{Mode: ModeOff}); err != nil {
		t.Fatalf("New: %v", err)
	}
	if isDir(staleC.Path()) || isDir(staleG.Path()) {
		t.Errorf("stale run group of dead pid %d survived New: %s", dead, staleG.Path())
	}
	for _, g := range []*cgroup.Group{liveG, otherG} {
		if !isDir(g.Path()) {
			t.Errorf("%s was removed but must be kept", g.Path())
		}
	}
	select {
	case <-slept:
	case <-time.After(10 * time.Second):
		t.Errorf("the process left in the dead pid's group survived New")
	}
	if isDir(busyC.Path()) || isDir(busyG.Path()) {
		t.Errorf("the dead pid's group that held a process survived New: %s", busyG.Path())
	}
}

func randomID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	f, err := os.Open("/dev/urandom")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}
