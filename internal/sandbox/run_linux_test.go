package sandbox

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestRunKillAndCloseEndEveryBlock: several blocks of one run, started
// concurrently, each with a background child; Run.Kill ends them all and
// Close returns with nothing left (the cgroup is removable only when empty).
func TestRunKillAndCloseEndEveryBlock(t *testing.T) {
	for mode, s := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			r, err := s.NewRun(nil)
			if err != nil {
				t.Fatal(err)
			}
			null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			defer null.Close()
			const n = 6
			procs := make([]*Process, n)
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := r.Start(Spec{Path: "/bin/sh", Args: sh("sleep 300 & sleep 300"), Dir: workdir(t, nil), Stdout: null, Stderr: null})
					if err != nil {
						errs <- err
						return
					}
					procs[i] = p
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			r.Kill()
			for _, p := range procs {
				done := make(chan Result, 1)
				go func() { done <- p.Wait() }()
				select {
				case res := <-done:
					if res.Signal != syscall.SIGKILL || res.Limit != LimitNone {
						t.Errorf("block result %+v, want SIGKILL and no limit", res)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("Wait hangs after Run.Kill")
				}
			}
			if err := r.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}

// TestCloseWhileRunning: Close alone (no Kill, no Wait by the caller) ends
// a running block.
func TestCloseWhileRunning(t *testing.T) {
	s := nativeSandbox(t)
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	p, err := r.Start(Spec{Path: "/bin/sleep", Args: []string{"sleep", "300"}, Dir: workdir(t, nil), Stdout: null, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("block pid %d still exists after Close: %v", pid, err)
	}
}

// TestCloseRemovesRunGroupAfterReturn: Close confirms the run's cgroup is
// empty before it returns and removes the directories in the background;
// they are gone once the removals have finished, in every hierarchy. A
// daemon that outlived its block (none can in native mode) would instead
// be killed and waited for inside Close.
func TestCloseRemovesRunGroupAfterReturn(t *testing.T) {
	s := nativeSandbox(t)
	if s.plat.cg == nil {
		skipOrFail(t, "no cgroups")
	}
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	p, err := r.Start(Spec{Path: "/bin/sh", Args: sh("sleep 300 & exit 0"), Dir: workdir(t, nil), Stdout: null, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	dirs := r.plat.group.ProcsFiles()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if pop, err := r.plat.group.Populated(); err == nil && pop {
		t.Fatal("run group still populated after Close returned")
	}
	s.plat.removals.Wait()
	for _, f := range dirs {
		if _, err := os.Stat(filepath.Dir(f)); !os.IsNotExist(err) {
			t.Errorf("%s still exists after the background removal: %v", filepath.Dir(f), err)
		}
	}
}

// TestPooledRunGroups: after the first run the pool holds run groups made
// ahead; a run with the default limits takes one (its one block, OneBlock,
// runs in it), is confined by its limits like any run, and leaves nothing
// when closed. A run with its own limits makes its own.
func TestPooledRunGroups(t *testing.T) {
	s := nativeSandbox(t)
	if s.plat.cg == nil {
		skipOrFail(t, "no cgroups")
	}
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	r0, err := s.NewRun(nil) // starts a refill
	if err != nil {
		t.Fatal(err)
	}
	_ = r0.Close()
	s.plat.pool.fills.Wait()
	s.plat.pool.mu.Lock()
	var ready []string
	for _, pg := range s.plat.pool.ready {
		ready = append(ready, pg.name)
	}
	s.plat.pool.mu.Unlock()
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	r.OneBlock()
	if !slices.Contains(ready, r.ID()) {
		t.Fatalf("second run did not take a pooled group (id %s, pool %v)", r.ID(), ready)
	}
	var out bytes.Buffer
	pr, pw, _ := os.Pipe()
	p, err := r.Start(Spec{Path: "/bin/sh", Args: sh("cat /proc/self/cgroup"), Dir: workdir(t, nil), Stdout: pw, Stderr: null})
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = out.ReadFrom(pr)
	pr.Close()
	if res := p.Wait(); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	// The pooled group is the block's: its accounting saw the block.
	if st, err := r.plat.group.Stats(); err != nil || st.CPU <= 0 {
		t.Errorf("the block did not run in the pooled group: %+v %v (%s)", st, err, out.String())
	}
	files := r.plat.group.ProcsFiles()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	s.plat.removals.Wait()
	for _, f := range files {
		if _, err := os.Stat(filepath.Dir(f)); !os.IsNotExist(err) {
			t.Errorf("%s left after Close: %v", filepath.Dir(f), err)
		}
	}
	own := DefaultLimits()
	own.Pids = 77
	s.plat.pool.fills.Wait()
	s.plat.pool.mu.Lock()
	ready = ready[:0]
	for _, pg := range s.plat.pool.ready {
		ready = append(ready, pg.name)
	}
	s.plat.pool.mu.Unlock()
	r2, err := s.NewRun(&own)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if slices.Contains(ready, r2.ID()) {
		t.Error("a run with its own limits took a pooled group")
	}
}
