package execution

import (
	"context"
	"os"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
)

// Stop ends a program for why: on a timeout SIGTERM first (to the program under the block's init, which
// may clean up) and SIGKILL for the whole run sandbox.TermGrace later; for any other reason SIGKILL at once.
// It returns the timer of a pending SIGKILL (nil if none) so that a caller that sees the end first can
// stop it.
func Stop(p *sandbox.Process, run *sandbox.Run, why Why) *time.Timer {
	if why == ForTimeout {
		p.Terminate()
		return time.AfterFunc(sandbox.TermGrace, run.Kill)
	}
	p.Kill()
	run.Kill()
	return nil
}

// Options are the limits Supervise enforces besides the sandbox's own.
type Options struct {
	Timeout        time.Duration // wall clock, from the start; 0: none
	Caps           Caps
	KillOnOverflow bool          // stop the program (OutputLimit) when a stream passes its cap; else drain
	ReapGrace      time.Duration // after a stop, how long to wait for the confirmed end; 0: as long as it takes
	// Wait confirms the end of the process tree (sandbox.Process.Wait when nil); a test seam.
	Wait func(*sandbox.Process) sandbox.Result
	// Kills counts the program when a limit or codellm ends it (nil: not counted).
	Kills KillCounter
}

// Supervised is how a supervised program ended and what it wrote. Unreaped says the sandbox did not
// confirm the end within ReapGrace: the Outcome is then Status WallTimeout or Cancelled with no numbers,
// and the cleanup goes on in the background until Done is closed.
type Supervised struct {
	Outcome
	Captured
	Unreaped bool
	Done     <-chan struct{}
}

// StartError is a failure before the program ran (the sandbox refused or could not start it, or no
// pipes): nothing ran. Its text is the cause's.
type StartError struct{ Err error }

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Supervise runs one program to its confirmed end: it starts spec in run (Stdout and Stderr are its own
// pipes), captures both streams within opts.Caps, enforces opts.Timeout and ctx (cancellation stops the
// program as Cancelled), and classifies the end. It owns run: run is closed when Supervise returns (or,
// Unreaped, when Done is closed; or, when the block left nothing behind (Process.LeftNothing), in the
// background: Run.CloseLater). A start failure is a *StartError.
func Supervise(ctx context.Context, run *sandbox.Run, spec sandbox.Spec, opts Options) (*Supervised, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		run.Close()
		return nil, &StartError{err}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeFiles(outR, outW)
		run.Close()
		return nil, &StartError{err}
	}
	spec.Stdout, spec.Stderr = outW, errW
	proc, err := run.Start(spec)
	closeFiles(outW, errW) // our copies of the write ends must go, or the readers never see EOF
	if err != nil {
		closeFiles(outR, errR)
		run.Close()
		return nil, &StartError{err}
	}
	capt := NewCapture(opts.Caps)
	capt.Start(outR, errR)
	wait := opts.Wait
	if wait == nil {
		wait = (*sandbox.Process).Wait
	}
	waited := make(chan sandbox.Result, 1)
	go func() { waited <- wait(proc) }()
	why, res, ok := watch(ctx, proc, run, capt, waited, opts)
	if !ok {
		done := make(chan struct{})
		go func() {
			run.Close()
			capt.Finish(time.Second)
			close(done)
		}()
		status := WallTimeout
		if why == ForCancel {
			status = Cancelled
		}
		CountKill(opts.Kills, status)
		return &Supervised{Outcome: Outcome{Status: status, Code: -1}, Unreaped: true, Done: done}, nil
	}
	if proc.LeftNothing() {
		// Nothing of the block runs any more: the pipes are at EOF once drained, and the run's close (its
		// init's exit, its cgroups) need not hold the reply.
		capt.Finish(time.Second)
		run.CloseLater()
	} else {
		run.Close() // SIGKILL whatever the program left behind
		capt.Finish(time.Second)
	}
	out := Of(res, why)
	CountKill(opts.Kills, out.Status)
	return &Supervised{Outcome: out, Captured: capt.Result()}, nil
}

// watch waits for the end, the timeout, an overflow or ctx, stops the program for the first of the
// latter, and returns why it stopped it and the confirmed result (ok false: not confirmed in ReapGrace).
func watch(ctx context.Context, proc *sandbox.Process, run *sandbox.Run, capt *Capture, waited <-chan sandbox.Result, opts Options) (Why, sandbox.Result, bool) {
	var timeout <-chan time.Time
	if opts.Timeout > 0 {
		t := time.NewTimer(opts.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var overflow <-chan struct{}
	if opts.KillOnOverflow {
		overflow = capt.Overflow()
	}
	why := NotStopped
	select {
	case res := <-waited:
		return NotStopped, res, true
	case <-timeout:
		why = ForTimeout
	case <-overflow:
		why = ForOutput
	case <-ctx.Done():
		why = ForCancel
	}
	var grace <-chan time.Time
	if opts.ReapGrace > 0 {
		// From the stop decision, not from the end of the kill calls: the whole wait stays within
		// timeout + ReapGrace.
		g := time.NewTimer(opts.ReapGrace)
		defer g.Stop()
		grace = g.C
	}
	if kill := Stop(proc, run, why); kill != nil {
		defer kill.Stop()
	}
	select {
	case res := <-waited:
		if why != ForTimeout && res.Signal == 0 && res.Err == nil {
			why = NotStopped // it exited on its own just before the kill: report what it did
		}
		return why, res, true
	case <-grace:
		return why, sandbox.Result{}, false
	}
}

func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
