//go:build linux

package sandbox

import (
	"fmt"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
	"os"
	"syscall"
	"time"
)

// startOff runs the program unconfined in its own process group: the
// explicit `off` mode, for hosts where nothing else works and the operator
// accepted that.
//
// child, when not nil, is a limit-less cgroup used only to find and kill
// descendants that left the process group. On cgroup v2 the process is born
// in it; on v1 it joins right after start, so a descendant forked in that
// instant can escape (best effort, as off mode is).
func (r *Run) startOff(spec *Spec, child *cgroup.Group) (*Process, error) {
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
		env = []string{} // never inherit codellm's environment
	}
	attr := &syscall.SysProcAttr{Setpgid: true}
	if child != nil && !r.sb.plat.noClone3 {
		if fd, ok := child.FD(); ok {
			attr.UseCgroupFD, attr.CgroupFD = true, fd
		}
	}
	start := time.Now()
	osp, err := startOnStableThread(spec.Path, spec.Args, &os.ProcAttr{
		Dir:   spec.Dir,
		Env:   env,
		Files: []*os.File{stdin, spec.Stdout, spec.Stderr},
		Sys:   attr,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: start %s: %v", ErrInvalidSpec, spec.Path, err)
	}
	if child != nil && !attr.UseCgroupFD {
		_ = child.Add(osp.Pid)
	}
	p := &Process{run: r, pid: osp.Pid, start: start, done: make(chan struct{})}
	// No limits applied: none to attribute; the group only serves Kill.
	p.plat = procPlatform{osp: osp, pgKill: true, started: start, group: child, offMode: true}
	go p.reap()
	return p, nil
}
