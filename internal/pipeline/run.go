package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/execution"
	"github.com/codellm/codellm/internal/sandbox"
)

// block is the coordinator's state of one block. Fields below "coordinator state" are touched only by the
// goroutine running run.loop.
type block struct {
	idx  int
	step Step
	dir  string

	// Child ends handed to the sandbox. stdout and stderr are closed by the parent right after Start;
	// stdin (nil means /dev/null) is held until the block has been reaped — see holdStdin.
	stdin, stdout, stderr *os.File

	proc atomic.Pointer[sandbox.Process]

	errTail *tailBuffer
	out     *headBuffer // last block: captured stdout; intermediate block when tapped: the edge tap

	// coordinator state
	started    bool
	setup      time.Duration // how long sandbox Start took (it returns once the program is exec'd)
	startErr   error
	exited     bool
	res        sandbox.Result
	killReason Outcome // set when codellm decided to kill the block, before it was reaped
	// readerGoneWhileAlive: when its downstream was reaped (and so its pipe broken), this block was still
	// running, so a later SIGPIPE-coded exit, or any exit after the downstream failed, may be the
	// consequence of the downstream's end.
	readerGoneWhileAlive bool
	outcome              Outcome // "" until decided
}

type exitEvent struct {
	idx int
	res sandbox.Result
}

type run struct {
	ctx    context.Context
	cfg    Config
	req    Request
	n      int
	blocks []*block
	runDir string
	sb     *sandbox.Run

	deadline time.Time
	hardStop time.Time // no waiting past this: deadline (or cancellation) + kill grace

	io       sync.WaitGroup // parent-side readers, copiers and the stdin feeder
	parent   []*os.File     // every parent-side pipe end, force-closed if the io goroutines overstay
	lastOut  *os.File       // parent read end of the last block's stdout
	drained  chan struct{}  // closed when the last block's stdout reached EOF
	overflow chan struct{}  // closed when the last block's stdout first went over the cap

	events      chan exitEvent
	ctxCanceled bool
	graceArmed  bool
	gaveUp      bool          // the sandbox did not confirm every death by the hard stop
	termKills   []*time.Timer // the SIGKILLs due after a timeout's SIGTERM grace
}

// Run executes the steps as a streaming pipeline and returns when every process of the run is gone and
// every workdir is removed (or, if the sandbox cannot confirm that, no later than deadline + kill grace).
// A cancelled ctx means the client went away: every block is killed, the outcome of the killed blocks is
// cancelled and Err.Code is CodeCancelled.
func Run(ctx context.Context, cfg Config, req Request) *Result {
	start := time.Now()
	cfg = cfg.withDefaults()
	if err := validate(cfg, req); err != nil {
		return &Result{Err: &Error{Code: CodeInvalid, Message: err.Error(), Block: -1, Cause: err}}
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultTimeout
	}
	if req.Input == nil {
		req.Input = []byte("{}")
	}
	r := &run{
		ctx:      ctx,
		cfg:      cfg,
		req:      req,
		n:        len(req.Steps),
		deadline: start.Add(req.Timeout),
		drained:  make(chan struct{}),
		overflow: make(chan struct{}),
		events:   make(chan exitEvent, len(req.Steps)),
	}
	r.hardStop = r.deadline.Add(cfg.KillGrace)
	r.blocks = make([]*block, r.n)
	for i, s := range req.Steps {
		r.blocks[i] = &block{idx: i, step: s, errTail: &tailBuffer{max: int(cfg.MaxStderrBytes)}}
	}
	if ctx.Err() != nil {
		for _, b := range r.blocks {
			b.outcome = OutcomeCancelled
		}
		r.ctxCanceled = true
		return r.result()
	}
	return r.execute()
}

func (r *run) execute() *Result {
	defer r.removeRunDir()
	if err := r.prepareDirs(); err != nil {
		return r.abortSetup(fmt.Errorf("workdir: %w", err))
	}
	sb, err := r.cfg.Sandbox.NewRun(r.req.Limits)
	if err != nil {
		return r.abortSetup(err)
	}
	if r.n == 1 {
		sb.OneBlock()
	}
	r.sb = sb
	if err := r.preparePipes(); err != nil {
		_ = r.sb.Close()
		return r.abortSetup(fmt.Errorf("pipes: %w", err))
	}
	r.startIO()
	r.startBlocks()
	r.loop()
	r.finish()
	return r.result()
}

// abortSetup reports a failure before any block started as a sandbox error of block 1: the run cannot be
// confined as promised, so nothing runs (fail closed).
func (r *run) abortSetup(err error) *Result {
	r.blocks[0].startErr = err
	r.blocks[0].outcome = OutcomeSandboxError
	for _, b := range r.blocks[1:] {
		b.outcome = OutcomeCancelled
	}
	return r.result()
}

// prepareDirs creates the run directory and every block's workdir holding exactly run<ext>, input.json
// and an empty tmp/ (§5.1).
func (r *run) prepareDirs() error {
	dir, err := os.MkdirTemp(r.cfg.WorkRoot, "codellm-run-")
	if err != nil {
		return err
	}
	r.runDir = dir                          // MkdirTemp creates it 0700
	if err := markRunDir(dir); err != nil { // SweepStale: a crashed server's workdirs are removed later
		return err
	}
	for i, b := range r.blocks {
		b.dir = filepath.Join(dir, strconv.Itoa(i+1))
		if err := os.Mkdir(b.dir, 0o700); err != nil {
			return err
		}
		// Explicit modes: a umask can only remove bits, but 0700 must hold exactly.
		if err := os.Chmod(b.dir, 0o700); err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(b.dir, "tmp"), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(b.dir, "run"+b.step.Ext), []byte(b.step.Code), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(b.dir, "input.json"), r.req.Input, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// removeRunDir removes every workdir. A block (in off mode) may have left a directory without write or
// search permission; permissions are restored and the removal retried so nothing is left behind.
func (r *run) removeRunDir() {
	if r.runDir == "" {
		return
	}
	if os.RemoveAll(r.runDir) == nil {
		return
	}
	_ = filepath.WalkDir(r.runDir, func(p string, d os.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(r.runDir)
}

// preparePipes creates every OS pipe of the run. Child ends go into the blocks; parent ends into r.parent.
func (r *run) preparePipes() (err error) {
	var all []*os.File
	pipe := func() (rd, wr *os.File) {
		if err != nil {
			return nil, nil
		}
		rd, wr, err = os.Pipe()
		if err == nil {
			all = append(all, rd, wr)
		}
		return rd, wr
	}
	defer func() {
		if err != nil {
			for _, f := range all {
				_ = f.Close()
			}
			r.parent = nil
			for _, b := range r.blocks {
				b.stdin, b.stdout, b.stderr = nil, nil, nil
			}
		}
	}()
	for _, b := range r.blocks {
		var pr *os.File
		pr, b.stderr = pipe()
		r.parent = append(r.parent, pr)
	}
	if r.req.Stdin != nil {
		var pw *os.File
		r.blocks[0].stdin, pw = pipe()
		r.parent = append(r.parent, pw)
	}
	for i := 0; i+1 < r.n; i++ {
		up, down := r.blocks[i], r.blocks[i+1]
		if !r.req.Tap {
			down.stdin, up.stdout = pipe()
			growPipe(up.stdout, interBlockPipe)
			continue
		}
		var ar, bw *os.File
		ar, up.stdout = pipe()
		down.stdin, bw = pipe()
		r.parent = append(r.parent, ar, bw)
	}
	r.lastOut, r.blocks[r.n-1].stdout = pipe()
	r.parent = append(r.parent, r.lastOut)
	if err != nil {
		return err
	}
	growPipe(r.blocks[r.n-1].stdout, int(min(r.cfg.MaxOutputBytes+1, maxCapturePipe)))
	// The children's ends must be in blocking mode (the Go runtime opens pipes non-blocking, and a
	// program handed a non-blocking stdout fails with EAGAIN); Fd() switches them.
	for _, b := range r.blocks {
		for _, f := range []*os.File{b.stdin, b.stdout, b.stderr} {
			if f != nil {
				f.Fd()
			}
		}
	}
	return nil
}

// interBlockPipe is the buffer asked for each pipe from one block to the next. With the kernel's default
// of 64 KiB a writer like cat (128 KiB per write) blocks halfway through every write and each chunk costs
// two context switches; at 1 MiB, 1 GiB through three cat blocks ran 35–60 % faster (the same processes
// outside any sandbox, BENCHMARKS.md). The pages are charged to the writing block's memory cgroup, so a
// run's pipes stay inside its memory limit; a pipe that is never filled costs nothing.
const interBlockPipe = 1 << 20

// maxCapturePipe bounds the buffer asked for the captured-stdout pipe (see growPipe): one per run, so even
// many concurrent runs stay far below the kernel's per-user pipe budget.
const maxCapturePipe = 1 << 20

// startIO starts the parent-side goroutines in the same order preparePipes appended r.parent.
func (r *run) startIO() {
	k := 0
	next := func() *os.File { f := r.parent[k]; k++; return f }
	for _, b := range r.blocks {
		f, t := next(), b.errTail
		r.io.Go(func() { drainTail(f, t) })
	}
	if r.req.Stdin != nil {
		f, data := next(), r.req.Stdin
		r.io.Go(func() { feed(f, data) })
	}
	if r.req.Tap {
		for i := 0; i+1 < r.n; i++ {
			up, down := next(), next()
			h := &headBuffer{max: r.cfg.MaxOutputBytes}
			r.blocks[i].out = h
			r.io.Go(func() { copyTap(up, down, h) })
		}
	}
	last := r.blocks[r.n-1]
	last.out = &headBuffer{max: r.cfg.MaxOutputBytes}
	f := next()
	r.io.Go(func() {
		// Over the cap the last block is killed at once (§6: never silent truncation) and the coordinator
		// told, so the failure is decided before the upstream blocks notice their reader died.
		captureHead(f, last.out, func() {
			if p := last.proc.Load(); p != nil {
				p.Kill()
			}
			close(r.overflow)
		})
		close(r.drained)
	})
}

// startBlocks starts every block in order before any is waited for, closing the parent's copies of each
// block's pipe ends right after its start so EOF and EPIPE propagate (§5.1).
func (r *run) startBlocks() {
	for i, b := range r.blocks {
		if err := r.ctx.Err(); err != nil {
			// The client is gone: start nothing more. loop() cancels what runs.
			r.closeChildEnds(r.blocks[i:], true)
			for _, nb := range r.blocks[i:] {
				nb.outcome = OutcomeCancelled
			}
			return
		}
		args := append([]string(nil), b.step.Args...)
		if len(args) == 0 {
			args = []string{b.step.Path}
		}
		// Every block sees its workdir at BlockDir, never the host's per-run directory.
		in := r.sb.Workdir(b.dir, BlockDir)
		args = append(args, path.Join(in, "run"+b.step.Ext))
		envf := b.step.Env
		if envf == nil {
			envf = DefaultEnv
		}
		setupStart := time.Now()
		p, err := r.sb.Start(sandbox.Spec{
			Path:    b.step.Path,
			Args:    args,
			Env:     envf(in),
			Dir:     b.dir,
			MountAt: BlockDir,
			Stdin:   b.stdin,
			Stdout:  b.stdout,
			Stderr:  b.stderr,
			Limits:  r.req.Limits,
			// Each block its own seeded stream, one clock (sandbox.Determinism; nil: off).
			Deterministic: r.req.Deterministic.ForBlock(i),
		})
		r.closeChildEnds(r.blocks[i:i+1], !holdStdin)
		if err != nil {
			// Fail closed: a block that cannot be confined stops the run; what already runs is killed
			// as cancelled by loop() once it sees this failing outcome.
			b.startErr = err
			b.outcome = OutcomeSandboxError
			r.closeChildEnds(r.blocks[i:], true)
			for _, nb := range r.blocks[i+1:] {
				nb.outcome = OutcomeCancelled
			}
			return
		}
		b.started = true
		b.setup = time.Since(setupStart)
		b.proc.Store(p)
		if i == r.n-1 {
			// The program runs from inside Start, so the capture may overflow before the process is
			// published; the overflow flag is set before the capture looks for the process, so checking it
			// after publishing loses no kill.
			if _, over := b.out.snapshot(); over {
				p.Kill()
			}
		}
		idx := i
		go func() {
			res := p.Wait()
			// The block is gone; whatever it left behind (in off mode: its process group) goes with it,
			// as it would in native mode where the block is its namespace's init.
			p.Kill()
			r.events <- exitEvent{idx: idx, res: res}
		}()
	}
}

// holdStdin: the parent keeps its copy of every block's stdin read end until it has processed that
// block's exit, instead of closing it right after Start like the other ends. The read end being held only
// delays EPIPE, never EOF; and it makes the pipe break — the upstream's next write fails — strictly after
// codellm has seen the downstream terminate. That turns §5.3's "exited non-zero after its downstream had
// terminated" into a fact codellm observes instead of a race between two reapers: see
// readerGoneWhileAlive.
const holdStdin = true

func (r *run) closeChildEnds(bs []*block, withStdin bool) {
	for _, b := range bs {
		for _, f := range []*os.File{b.stdout, b.stderr} {
			if f != nil {
				_ = f.Close()
			}
		}
		if withStdin && b.stdin != nil {
			_ = b.stdin.Close()
		}
	}
}

// loop is the coordinator: it applies §5.2 to each exit in reap order until every block has an outcome.
func (r *run) loop() {
	deadline := time.NewTimer(time.Until(r.deadline))
	defer deadline.Stop()
	var graceC, hardC, drainC <-chan time.Time
	drained, overflow := r.drained, r.overflow
	lastDrained := false
	ctxDone := r.ctx.Done()
	r.settle(lastDrained)
	for !r.allDecided() {
		select {
		case ev := <-r.events:
			b := r.blocks[ev.idx]
			b.exited, b.res = true, ev.res
			r.releaseStdin(b)
			if ev.idx == r.n-1 && !lastDrained {
				// Whatever still holds the last stdout is dead or escaped the sandbox; a grace is plenty
				// to read what is left in the pipe.
				drainC = time.After(r.cfg.KillGrace)
			}
		case <-overflow:
			// The last block reached output_limit now, whenever the sandbox reaps it; deciding here,
			// before the upstream blocks see EPIPE, is what reports it rather than their exits.
			overflow = nil
			if last := r.blocks[r.n-1]; last.outcome == "" && last.killReason == "" {
				last.outcome = OutcomeOutputLimit
			}
		case <-drained:
			drained, drainC, lastDrained = nil, nil, true
		case <-drainC:
			drainC = nil
			_ = r.lastOut.Close()
		case <-ctxDone:
			ctxDone = nil
			r.ctxCanceled = true
			r.killRunning(OutcomeCancelled)
			if hs := time.Now().Add(r.cfg.KillGrace); hs.Before(r.hardStop) {
				r.hardStop = hs
			}
			hardC = time.After(time.Until(r.hardStop))
		case <-deadline.C:
			reason := OutcomeTimedOut
			if r.graceArmed {
				reason = OutcomeExcused // already condemned by the last block's success (§5.2 item 3)
			}
			r.killRunning(reason)
			if hardC == nil {
				hardC = time.After(time.Until(r.hardStop))
			}
		case <-graceC:
			graceC = nil
			r.killRunning(OutcomeExcused)
		case <-hardC:
			// The sandbox did not confirm the deaths within the kill grace: stop waiting (§5.2 item 4)
			// and report what it failed to do.
			r.giveUp()
			lastDrained = true
		}
		if r.settle(lastDrained) && graceC == nil && !r.graceArmed {
			r.graceArmed = true
			if r.anyRunning() {
				graceC = time.After(r.cfg.KillGrace)
			}
		}
	}
}

// settle decides every outcome that can be decided now, downstream first (an upstream's outcome may
// depend on its downstream's), and applies the consequences. It reports whether the last block ended ok.
func (r *run) settle(lastDrained bool) (lastOK bool) {
	for changed := true; changed; {
		changed = false
		for i := r.n - 1; i >= 0; i-- {
			b := r.blocks[i]
			if b.outcome != "" {
				if b.outcome.Failing() && !b.exited {
					// Decided before it was reaped (a start failure, output_limit): cancel what runs.
					r.killRunning(OutcomeCancelled)
				}
				continue
			}
			if !b.exited {
				continue
			}
			o, ok := r.classify(b, lastDrained)
			if !ok {
				continue
			}
			b.outcome, changed = o, true
			if o.Failing() {
				r.killRunning(OutcomeCancelled) // §5.2 item 2
			}
		}
	}
	last := r.blocks[r.n-1]
	return last.outcome == OutcomeOK
}

// classify applies §5.3 to an exited block; ok is false while the decision must wait (for the last
// block's stdout to drain, or for the outcome of a downstream that was reaped first).
func (r *run) classify(b *block, lastDrained bool) (o Outcome, ok bool) {
	if b.killReason != "" {
		return b.killReason, true
	}
	if b.res.Err != nil {
		return OutcomeSandboxError, true
	}
	if b.idx == r.n-1 {
		if !lastDrained {
			return "", false
		}
		if _, over := b.out.snapshot(); over {
			return OutcomeOutputLimit, true
		}
	}
	if b.res.Signal == 0 && b.res.ExitCode == 0 {
		return OutcomeOK, true
	}
	upstream := b.idx < r.n-1
	if upstream && b.res.Signal == syscall.SIGPIPE {
		// It can only have lost its reader; the reader's outcome decides the run. The last block's reader
		// is codellm, which never leaves first: a SIGPIPE there came from a pipe of the block's own.
		return OutcomeExcused, true
	}
	if b.res.Signal == 0 && b.readerGoneWhileAlive {
		switch d := r.blocks[b.idx+1]; d.outcome {
		case "":
			return "", false
		case OutcomeOK, OutcomeExcused:
			// Only SIGPIPE excuses: the block was still running when its reader finished, but nothing says
			// its exit came from the broken pipe rather than a failure of its own, which must not be
			// masked by a downstream that did not wait for it. A shell reports its command's SIGPIPE death
			// as exit status 128+SIGPIPE; that is the same case.
			if b.res.ExitCode == shellSIGPIPE {
				return OutcomeExcused, true
			}
			return OutcomeFailed, true
		default:
			// Its downstream failed (or was killed) first: the upstream ended as a consequence,
			// exactly as if codellm had killed it when the downstream failed.
			return OutcomeCancelled, true
		}
	}
	return OutcomeFailed, true
}

// shellSIGPIPE is the exit status a shell (bash, sh) reports when the command it waited for died of
// SIGPIPE: `yes` as the last command of a bash block that lost its reader.
const shellSIGPIPE = 128 + int(syscall.SIGPIPE)

// releaseStdin breaks the edge into b now that b has been reaped, noting whether its upstream was still
// running at that moment (then, and only then, can an upstream exit be the consequence of the break).
func (r *run) releaseStdin(b *block) {
	// Look before breaking the edge: once it is broken the upstream may die of it (SIGPIPE) within
	// microseconds, and would then look as if it had ended on its own.
	if b.idx > 0 {
		up := r.blocks[b.idx-1]
		if up.started && !up.exited {
			if p := up.proc.Load(); p != nil && !processEnded(p.Pid()) {
				up.readerGoneWhileAlive = true
			}
		}
	}
	if b.stdin != nil {
		_ = b.stdin.Close()
	}
}

// killRunning kills every started block that has not been reaped and has no kill reason yet, recording why.
func (r *run) killRunning(reason Outcome) {
	killed := false
	for _, b := range r.blocks {
		if b.started && !b.exited && b.killReason == "" {
			b.killReason = reason
			if p := b.proc.Load(); reason == OutcomeTimedOut {
				// SIGTERM first (to the program under the block's init), SIGKILL after the grace.
				if t := execution.Stop(p, r.sb, execution.ForTimeout); t != nil {
					r.termKills = append(r.termKills, t)
				}
			} else {
				p.Kill()
			}
			killed = true
		}
	}
	if killed && reason != OutcomeExcused && reason != OutcomeTimedOut {
		// Belt and braces: everything of the run, descendants included.
		r.sb.Kill()
	}
}

func (r *run) anyRunning() bool {
	for _, b := range r.blocks {
		if b.started && !b.exited {
			return true
		}
	}
	return false
}

// allDecided reports whether every block has its outcome and every started block has been reaped.
func (r *run) allDecided() bool {
	for _, b := range r.blocks {
		if b.outcome == "" || (b.started && !b.exited) {
			return false
		}
	}
	return true
}

// errNotReaped marks a block whose death the sandbox did not confirm by the hard stop.
var errNotReaped = errors.New("sandbox did not confirm the block's processes were gone within the kill grace")

func (r *run) giveUp() {
	r.gaveUp = true
	r.sb.Kill()
	for _, f := range r.parent {
		_ = f.Close()
	}
	for _, b := range r.blocks {
		if b.started && !b.exited {
			b.exited = true
			b.res = sandbox.Result{ExitCode: -1, Signal: syscall.SIGKILL, Err: errNotReaped}
			r.releaseStdin(b)
		}
	}
}

// finish waits for the parent-side io (bounded by a kill grace and the hard stop, then forced) and closes
// the sandbox run.
func (r *run) finish() {
	for _, t := range r.termKills {
		t.Stop()
	}
	r.sb.Kill()
	r.closeChildEnds(r.blocks, true) // every stdin still held (already closed ones are no-ops)
	done := make(chan struct{})
	go func() { r.io.Wait(); close(done) }()
	bound := time.Now().Add(r.cfg.KillGrace)
	if r.hardStop.Before(bound) {
		bound = r.hardStop
	}
	t := time.NewTimer(time.Until(bound))
	select {
	case <-done:
	case <-t.C:
		// Only a process that escaped the sandbox (off mode) can still hold a write end; stop reading.
		for _, f := range r.parent {
			_ = f.Close()
		}
		<-done
	}
	t.Stop()
	if r.gaveUp {
		// Close waits for the processes the sandbox could not confirm dead; the reply must not (§5.2
		// item 4), so the wait continues in the background, untracked: it may never end.
		go func() { _ = r.sb.Close() }()
		return
	}
	// Every block was waited for, so none of their processes is left; the reply need not wait for their
	// inits' exits or the run's cgroups either.
	r.sb.CloseLater()
}

// status is the block's process outcome (execution.Of) given why codellm stopped it, if it did; a block
// that never ran is a sandbox error (its start failed) or cancelled.
func (b *block) status() execution.Status {
	if !b.exited {
		if b.startErr != nil || b.outcome == OutcomeSandboxError {
			return execution.SandboxError
		}
		return execution.Cancelled
	}
	why := execution.NotStopped
	switch {
	case b.outcome == OutcomeOutputLimit: // decided at the overflow, before the kill that followed
		why = execution.ForOutput
	case b.killReason == OutcomeTimedOut:
		why = execution.ForTimeout
	case b.killReason == OutcomeCancelled:
		why = execution.ForCancel
	case b.killReason == OutcomeExcused:
		why = execution.ForUnneeded
	}
	return execution.Of(b.res, why).Status
}

// result assembles the report and selects the error of §5.3.
func (r *run) result() *Result {
	res := &Result{Blocks: make([]BlockResult, r.n)}
	for i, b := range r.blocks {
		br := BlockResult{Index: i, Lang: b.step.Lang, Program: b.step.Program, Outcome: b.outcome,
			Stderr: b.errTail.bytes(), Setup: b.setup}
		br.Status = b.status()
		if b.exited {
			br.Duration, br.CPU, br.MaxRSS, br.Limit = b.res.Wall, b.res.CPU, b.res.MaxRSS, b.res.LimitDesc
			if b.res.Signal != 0 {
				br.Signal = execution.SignalName(b.res.Signal)
			} else if b.res.Err == nil || b.res.ExitCode >= 0 {
				code := b.res.ExitCode
				br.ExitCode = &code
			}
		}
		if b.out != nil {
			buf, trunc := b.out.snapshot()
			br.Stdout, br.StdoutTruncated = buf, trunc
			if i < r.n-1 {
				br.PipeBuffer, br.PipeTruncated = buf, trunc
			}
		}
		res.Blocks[i] = br
	}
	res.Stdout = res.Blocks[r.n-1].Stdout
	if r.ctxCanceled {
		res.Err = &Error{Code: CodeCancelled, Message: "run cancelled: the client went away", Block: -1}
		return res
	}
	for i, b := range r.blocks {
		if b.outcome.Failing() {
			res.Err = r.blockError(b, &res.Blocks[i])
			break
		}
	}
	return res
}

func (r *run) blockError(b *block, br *BlockResult) *Error {
	prefix := fmt.Sprintf("block %d/%d: ", b.idx+1, r.n)
	e := &Error{Block: b.idx}
	withTail := func(s string) string {
		if t := stderrTail(br.Stderr); t != "" {
			return s + ": " + t
		}
		return s
	}
	switch b.outcome {
	case OutcomeTimedOut:
		e.Code, e.Message = CodeTimeout, prefix+"timed out after "+r.req.Timeout.String()
	case OutcomeOutputLimit:
		e.Code = CodeOutputLimit
		e.Message = fmt.Sprintf("%soutput limit exceeded (stdout over %d bytes)", prefix, r.cfg.MaxOutputBytes)
	case OutcomeSandboxError:
		cause := b.startErr
		if cause == nil {
			cause = b.res.Err
		}
		e.Code, e.Cause = CodeSandboxUnavailable, cause
		e.Message = prefix + "sandbox unavailable: " + cause.Error()
	default: // failed
		e.Code = CodeNonzeroExit
		var s string
		if b.res.Signal != 0 {
			s = "killed by signal " + execution.SignalName(b.res.Signal)
		} else {
			s = fmt.Sprintf("non-zero exit (code %d)", b.res.ExitCode)
		}
		if b.res.LimitDesc != "" {
			s += " (" + b.res.LimitDesc + ")"
		}
		e.Message = prefix + withTail(s)
	}
	return e
}
