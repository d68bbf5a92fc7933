//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// startOff runs the program unconfined in its own process group.
func (r *Run) startOff(spec *Spec) (*Process, error) {
	stdin := spec.Stdin
	if stdin == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, fmt.Errorf("sandbox: open %s: %w", os.DevNull, err)
		}
		defer f.Close()
		stdin = f
	}
	env := spec.Env
	if env == nil {
		env = []string{}
	}
	start := time.Now()
	osp, err := os.StartProcess(spec.Path, spec.Args, &os.ProcAttr{
		Dir: spec.Dir, Env: env, Files: []*os.File{stdin, spec.Stdout, spec.Stderr},
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: start %s: %v", ErrInvalidSpec, spec.Path, err)
	}
	p := &Process{run: r, pid: osp.Pid, start: start, done: make(chan struct{})}
	p.plat = procPlatform{osp: osp, pgKill: true, started: start}
	go p.reap()
	return p, nil
}
