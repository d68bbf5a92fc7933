//go:build !linux

package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

type platform struct{}

type runPlatform struct{}

type procPlatform struct {
	osp     *os.Process
	mu      sync.Mutex
	reaped  bool
	pgKill  bool
	limits  Limits
	started time.Time
}

// Main is a no-op outside Linux: there is no helper to run.
func Main() {}

func (s *Sandbox) init() error {
	s.report = Report{Mode: s.cfg.Mode, Network: s.cfg.Network, Missing: []string{}}
	if s.cfg.Mode != ModeOff {
		s.report.Missing = []string{"platform"}
		return &UnavailableError{Mechanism: "platform",
			Reason: "the " + string(s.cfg.Mode) + " sandbox needs Linux; this is " + runtime.GOOS,
			Fix:    "run codellm on Linux, or choose --sandbox off explicitly"}
	}
	s.report.Ready = true
	s.report.Warnings = []string{"sandbox mode is off: blocks run unconfined as codellm's own user"}
	return nil
}

// Probe builds a Sandbox for cfg and returns its report.
func Probe(cfg Config) Report {
	s, err := New(cfg)
	if err != nil {
		return Report{Mode: cfg.Mode, Missing: []string{"platform"}, Warnings: []string{err.Error()}}
	}
	return s.Report()
}

// Settle: there is no background work without Linux cgroups.
func (s *Sandbox) Settle() {}

// CloseLater is Close: without a native sandbox there is no teardown to
// take off the caller's path.
func (r *Run) CloseLater() { _ = r.Close() }

// SerialStats: nothing is shared between blocks without Linux.
func (s *Sandbox) SerialStats() SerialStats { return SerialStats{} }

// Close: nothing is made ahead of need without Linux.
func (s *Sandbox) Close() error { return nil }

func (r *Run) init() error       { return nil }
func (r *Run) privateRoot() bool { return false }
func (p *Process) holds() bool   { return false }
func (r *Run) killAll()          {}
func (r *Run) release() error    { return nil }

func (r *Run) start(spec *Spec, seq int, one bool) (*Process, error) { return r.startOff(spec) }

func (p *Process) reap() {
	pp := &p.plat
	st, err := pp.osp.Wait()
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	pp.mu.Lock()
	pp.reaped = true
	pp.mu.Unlock()
	res := Result{Wall: time.Since(pp.started), ExitCode: -1}
	if err != nil {
		res.Err = fmt.Errorf("sandbox: wait: %w", err)
	} else if ws, ok := st.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			res.Signal = ws.Signal()
		} else {
			res.ExitCode = ws.ExitStatus()
		}
		res.CPU = st.UserTime() + st.SystemTime()
	}
	p.res = res
	close(p.done)
}

func (p *Process) signal(sig syscall.Signal) {
	pp := &p.plat
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if !pp.reaped {
		_ = syscall.Kill(-p.pid, sig)
	}
}

func (p *Process) kill() {
	pp := &p.plat
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if !pp.reaped {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		_ = pp.osp.Kill()
	}
}
