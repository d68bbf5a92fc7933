//go:build linux

package pipeline

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSweepStale (red-team item 7): a chat run's workdir (the blocks' code and the delivery bag) left by a
// crashed server was never swept. A run directory whose owner process died is removed; a live run's (this
// process, or another one still running) and one not yet marked are kept; so is one whose PID was reused
// by a process that started later.
func TestSweepStale(t *testing.T) {
	root := t.TempDir()
	mk := func(owner string) string {
		dir, err := os.MkdirTemp(root, "codellm-run-")
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, "1", "tmp"), 0o700)
		os.WriteFile(filepath.Join(dir, "1", "input.json"), []byte(`{"secret":"bag"}`), 0o600)
		if owner != "" {
			os.WriteFile(filepath.Join(dir, runOwnerName), []byte(owner), 0o600)
		}
		return dir
	}
	// A server that ran and died: a real process, waited for, so its PID names nobody (or somebody newer).
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadDir := mk(fmt.Sprintf("%d %d", dead.Process.Pid, 1))
	self := mk(selfOwner)
	unmarked := mk("")
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	st, err := procStart(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	live := mk(fmt.Sprintf("%d %d", other.Process.Pid, st))
	reused := mk(fmt.Sprintf("%d %d", other.Process.Pid, st-1)) // same PID, an earlier process
	removed, errs := SweepStale(root)
	if len(errs) != 0 || len(removed) != 2 {
		t.Fatalf("removed %v, errors %v; want the dead and the reused-PID directories", removed, errs)
	}
	for _, d := range []string{self, unmarked, live} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was swept: %v", d, err)
		}
	}
	for _, d := range []string{deadDir, reused} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s remains: %v", d, err)
		}
	}
}
