package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// deadPid returns the pid of a process that has exited and been reaped and
// that no live process holds now.
func deadPid(t testing.TB) int {
	t.Helper()
	for range 20 {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatalf("run true: %v", err)
		}
		pid := cmd.Process.Pid
		if unix.Kill(pid, 0) == unix.ESRCH {
			return pid
		}
	}
	t.Fatal("could not find a pid that no live process holds")
	return 0
}

func exists(t testing.TB, dirs []string) (all, any bool) {
	t.Helper()
	all = true
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		switch {
		case err == nil && fi.IsDir():
			any = true
		case errors.Is(err, os.ErrNotExist):
			all = false
		default:
			t.Fatalf("lstat %s: %v", d, err)
		}
	}
	return all, any
}

func TestSweepStale(t *testing.T) {
	t.Run("detected", func(t *testing.T) { testSweepStale(t, requireHost(t)) })
	t.Run("v2", func(t *testing.T) { testSweepStale(t, requireV2Host(t)) })
}

// testSweepStale uses its own name rule ("sw<tag>-<pid>-<seq>", stale when
// <pid> is dead) so that concurrent sweeps by other test binaries, which
// use codellm's rule, cannot touch these groups.
func testSweepStale(t *testing.T, h *Host) {
	tag := "sw" + randHex(4)
	var asked []string
	stale := func(name string) bool {
		rest, ok := strings.CutPrefix(name, tag+"-")
		if !ok {
			return false
		}
		asked = append(asked, name)
		pidS, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidS)
		return err == nil && unix.Kill(pid, 0) == unix.ESRCH
	}
	mk := func(name string, child bool) (*Group, *Group) {
		t.Helper()
		g, err := h.NewGroup(name, Limits{})
		if err != nil {
			t.Fatalf("NewGroup %s: %v", name, err)
		}
		t.Cleanup(func() {
			if err := g.Remove(); err != nil {
				t.Errorf("cleanup %s: %v", name, err)
			}
		})
		var c *Group
		if child {
			if c, err = g.NewChild("block-1"); err != nil {
				t.Fatalf("NewChild: %v", err)
			}
		}
		return g, c
	}
	dead := deadPid(t)
	staleG, staleC := mk(tag+"-"+strconv.Itoa(dead)+"-1", true)
	liveG, _ := mk(tag+"-"+strconv.Itoa(os.Getpid())+"-1", true)
	busyG, busyC := mk(tag+"-"+strconv.Itoa(dead)+"-2", true)
	otherG, _ := mk("other"+tag+"-"+strconv.Itoa(dead)+"-1", false)

	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatalf("start sleep: %v", err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	if err := busyC.Add(sleep.Process.Pid); err != nil {
		t.Fatalf("add sleep to %s: %v", busyC.Path(), err)
	}

	// Differential: the stale group and its child exist before the sweep.
	if all, _ := exists(t, append(staleG.dirs, staleC.dirs...)); !all {
		t.Fatalf("stale group missing before the sweep: %v", staleG.dirs)
	}
	removed, err := h.SweepStale(stale)
	if err != nil {
		t.Fatalf("SweepStale: %v", err)
	}
	if removed != 1 {
		t.Errorf("removed = %d, want 1 (only %s)", removed, staleG.name)
	}
	if _, any := exists(t, append(staleG.dirs, staleC.dirs...)); any {
		t.Errorf("stale group of dead pid %d still exists after the sweep: %v", dead, staleG.dirs)
	}
	for _, g := range []*Group{liveG, busyG, otherG} {
		if all, _ := exists(t, g.dirs); !all {
			t.Errorf("%s was removed but must be kept", g.name)
		}
	}
	if all, _ := exists(t, busyC.dirs); !all {
		t.Errorf("child of the busy group was removed")
	}
	for _, n := range asked {
		if strings.HasPrefix(n, "other") {
			t.Errorf("predicate was asked about %s", n)
		}
	}
	if got, err := readPids(busyC.dirs[0] + "/cgroup.procs"); err != nil || len(got) != 1 || got[0] != sleep.Process.Pid {
		t.Errorf("busy group procs = %v, %v; want the sleep %d untouched", got, err, sleep.Process.Pid)
	}
	if err := sleep.Process.Signal(unix.Signal(0)); err != nil {
		t.Errorf("sleep in the busy group was disturbed: %v", err)
	}
}
