package sandbox

import (
	"errors"
	"os"
	"testing"
)

// Differential: a run declared OneBlock runs its block in the run's own cgroup (no child group is made)
// and still reports the block's CPU and peak memory; an undeclared run gives its first block a child
// group. A second Start of a OneBlock run is refused.
func TestOneBlockRunsInTheRunsGroup(t *testing.T) {
	s := nativeSandbox(t)
	for _, one := range []bool{false, true} {
		r, err := s.NewRun(nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.plat.group == nil {
			r.Close()
			t.Skip("no cgroups on this host")
		}
		if one {
			r.OneBlock()
		}
		dir := workdir(t, nil)
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		spec := Spec{Path: "/bin/sh", Args: sh("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; head -c 8000000 /dev/zero | tail -c 1 >/dev/null"),
			Env: stdEnv(dir), Dir: dir, Stdout: null, Stderr: null}
		p, err := r.Start(spec)
		if err != nil {
			r.Close()
			t.Fatal(err)
		}
		res := p.Wait()
		ents, err := os.ReadDir(r.plat.group.Path())
		if err != nil {
			r.Close()
			t.Fatal(err)
		}
		var kids []string
		for _, e := range ents {
			if e.IsDir() {
				kids = append(kids, e.Name())
			}
		}
		if res.ExitCode != 0 || res.CPU <= 0 || res.MaxRSS <= 0 {
			t.Errorf("OneBlock %v: result %+v, want exit 0 with the block's CPU and peak memory", one, res)
		}
		if one && len(kids) != 0 {
			t.Errorf("OneBlock: the run's group holds groups %v, want none (the block runs in it)", kids)
		}
		if !one && len(kids) != 1 {
			t.Errorf("an undeclared run's group holds groups %v, want its first block's (the test shows nothing)", kids)
		}
		if one {
			if _, err := r.Start(spec); !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("a second Start of a OneBlock run: %v, want ErrInvalidSpec", err)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
