package sandbox

import (
	"slices"
	"testing"
	"time"
)

// A Sandbox's spawners grow one at a time while every running one is
// busy, never beyond their bound: a block that finds them all lent waits
// for one to come back (and the wait is counted), and Close ends them all.
func TestSpawnerPoolGrowsToItsBound(t *testing.T) {
	s := nativeSandbox(t)
	h := &helperSpawner{max: 2}
	self := s.plat.helperPath
	a, b := h.acquire(self), h.acquire(self)
	if a == nil || b == nil || a == b {
		t.Fatalf("two busy spawners: got %v and %v", a, b)
	}
	pids := h.pids()
	if len(pids) != 2 {
		t.Fatalf("%d spawners running, want 2", len(pids))
	}
	got := make(chan *liveSpawner)
	go func() { got <- h.acquire(self) }()
	select {
	case c := <-got:
		t.Fatalf("a third block got a spawner (%v) while both were lent and the bound is 2", c)
	case <-time.After(100 * time.Millisecond):
	}
	h.release(a, false)
	if c := <-got; c != a {
		t.Fatalf("the waiting block got %v, not the spawner handed back", c)
	}
	if _, wait, n := h.stats(); wait < 100*time.Millisecond || n != 2 {
		t.Errorf("stats: waited %v with %d spawners, want ≥ 100ms with 2", wait, n)
	}
	h.release(a, false)
	h.release(b, false)
	h.close()
	if left := slices.DeleteFunc(leftChildren(t), func(pid int) bool { return !slices.Contains(pids, pid) }); len(left) > 0 {
		t.Errorf("spawners %v still there after close", left)
	}
	if h.acquire(self) != nil {
		t.Error("a closed pool lent a spawner")
	}
}

// SerialStats counts what every block passed through: one spawner round
// trip, and (with cgroups) the run's group made and removed.
func TestSerialStatsCountBlocks(t *testing.T) {
	s := nativeSandbox(t)
	s.Settle()
	before := s.SerialStats()
	const blocks = 3
	for range blocks {
		mustRun(t, s, "/bin/true")
	}
	s.Settle()
	after := s.SerialStats()
	if n := after.SpawnerRequests - before.SpawnerRequests; n != blocks {
		t.Errorf("%d spawner requests for %d blocks", n, blocks)
	}
	if after.SpawnerHeld <= before.SpawnerHeld || after.SpawnerBusy <= before.SpawnerBusy || after.Spawners < 1 {
		t.Errorf("spawner times did not grow: %+v then %+v", before, after)
	}
	if s.plat.runMechs().has(mCgroup) {
		if made, gone := after.GroupsMade-before.GroupsMade, after.GroupsRemoved-before.GroupsRemoved; made < 1 || gone < blocks {
			t.Errorf("%d cgroups made and %d removed for %d blocks (the pool makes some ahead)", made, gone, blocks)
		}
	}
}
