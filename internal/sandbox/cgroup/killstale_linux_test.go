package cgroup

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A stale group (its owner dead) left frozen with a process in it, as a codellm SIGKILLed between the
// freeze and the thaw of a v1 run-group kill leaves it: the process took its SIGKILL (the parent-death
// signal) but, frozen, never dies (issue 35 item 7). Differential: SweepStale alone leaves the group and
// the process; KillStale kills it, and the sweep then removes the group. The names follow the sweep
// test's own rule, so that other test binaries' sweeps cannot touch them.
func TestKillStaleEndsFrozenLeftovers(t *testing.T) {
	t.Run("detected", func(t *testing.T) { testKillStale(t, requireHost(t)) })
	t.Run("v2", func(t *testing.T) { testKillStale(t, requireV2Host(t)) })
}

func testKillStale(t *testing.T, h *Host) {
	if h.freezer < 0 {
		skipOrFail(t, "no freezer here")
	}
	tag := "ks" + randHex(4)
	stale := func(name string) bool {
		rest, ok := strings.CutPrefix(name, tag+"-")
		pidS, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidS)
		return ok && err == nil && unix.Kill(pid, 0) == unix.ESRCH
	}
	g, err := h.NewGroup(tag+"-"+strconv.Itoa(deadPid(t))+"-1", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.NewChild("block-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.thawAndRemove(t) })
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleep.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleep.Process.Kill(); <-exited })
	if err := c.Add(sleep.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := g.freeze(); err != nil {
		t.Fatal(err)
	}
	_ = sleep.Process.Signal(unix.SIGKILL) // the parent-death signal of a dead server
	select {
	case <-exited: // the v2 freezer lets a frozen task die of SIGKILL: nothing is left to end
		t.Logf("cgroup v%d: the frozen process died of its SIGKILL", h.version)
	case <-time.After(300 * time.Millisecond):
		// Frozen for good (v1): SweepStale alone leaves the group and the process, as on the old code.
		if removed, _ := h.SweepStale(stale); removed != 0 {
			t.Fatalf("SweepStale removed %d groups holding a process", removed)
		}
	}
	killed, err := h.KillStale(stale, DefaultWait)
	if err != nil {
		t.Fatalf("KillStale: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("the stale group's frozen process survived KillStale (%d groups killed)", killed)
	}
	if removed, err := h.SweepStale(stale); removed != 1 || err != nil {
		t.Fatalf("SweepStale after KillStale removed %d (%v), want the group", removed, err)
	}
	if _, any := exists(t, append(g.dirs, c.dirs...)); any {
		t.Fatalf("the stale group is still there: %v", g.dirs)
	}
}

// thawAndRemove is the test's cleanup of a group it may have left frozen.
func (g *Group) thawAndRemove(t *testing.T) {
	if d := g.dirs[g.host.freezer]; d != "" {
		if g.host.version == 2 {
			_, _ = writeOptional(d+"/cgroup.freeze", "0")
		} else {
			_ = writeFile(d+"/freezer.state", "THAWED")
		}
	}
	if _, any := exists(t, g.dirs); any {
		if err := g.Remove(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}
