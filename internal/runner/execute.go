package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/codellm/codellm/internal/execution"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/slots"
)

// Piston's run status codes: null when the program exited 0 on its own.
const (
	StatusRuntimeError = "RE" // exited non-zero
	StatusSignal       = "SG" // died of a signal codellm did not send (a sandbox limit is named in message)
	StatusTimeout      = "TO" // killed at run_timeout or at run_cpu_time (Piston's isolate reports both as TO)
	StatusStdoutLimit  = "OL" // stdout passed MaxOutputBytes: killed, stdout truncated
	StatusStderrLimit  = "EL" // stderr passed MaxOutputBytes: killed, stderr truncated
	StatusInternal     = "XX" // canceled by the caller or by a session reset
)

// StageResult is Piston's "run" (and "compile") object. Times are milliseconds, memory is bytes. Code is
// null when a signal ended the program; Signal is then its name ("SIGKILL") and null otherwise. Output is
// stdout and stderr in the order codellm read them (see capture). Invalid UTF-8 in the program's output
// becomes U+FFFD in JSON, as with Piston.
type StageResult struct {
	Stdout   string  `json:"stdout"`
	Stderr   string  `json:"stderr"`
	Output   string  `json:"output"`
	Code     *int    `json:"code"`
	Signal   *string `json:"signal"`
	Message  *string `json:"message"`
	Status   *string `json:"status"`
	WallTime int64   `json:"wall_time"`
	CPUTime  int64   `json:"cpu_time"`
	Memory   int64   `json:"memory"`
}

// ExecuteResponse is the 200 body of POST /api/v2/execute. Compile is present for a compiled language
// (its compile stage) and absent otherwise. Files lists what the run created or changed in its workspace;
// FilesTruncated says some changed files were left out (more than FilesOutMaxCount, or a workspace with
// more entries than the runner scans).
type ExecuteResponse struct {
	Language       string       `json:"language"`
	Version        string       `json:"version"`
	Run            StageResult  `json:"run"`
	Compile        *StageResult `json:"compile,omitempty"`
	Files          []OutFile    `json:"files,omitempty"`
	FilesTruncated bool         `json:"files_truncated,omitempty"`
	// Deterministic is set when the run was deterministic (request metadata or the operator's default).
	Deterministic *Deterministic `json:"deterministic,omitempty"`
}

// Execute runs one request, in the session workspace sessionID ("" = a fresh directory removed
// afterwards). It validates everything before taking the session or a slot. Errors are *Error.
func (r *Runner) Execute(ctx context.Context, sessionID string, req ExecuteRequest) (*ExecuteResponse, error) {
	resp, e := r.execute(ctx, sessionID, &req)
	if e != nil {
		return nil, e
	}
	return resp, nil
}

func (r *Runner) execute(ctx context.Context, sessionID string, req *ExecuteRequest) (*ExecuteResponse, *Error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, closedErr()
	}
	r.inflight.Add(1)
	r.mu.Unlock()
	defer r.inflight.Done()

	if sessionID != "" {
		if e := checkSessionID(sessionID); e != nil {
			return nil, e
		}
	}
	p, e := r.prepare(req)
	if e != nil {
		return nil, e
	}
	if p.det, e = r.determinism(req.Metadata); e != nil {
		return nil, e
	}
	if p.netAllow, e = r.networkAllow(req.Metadata); e != nil {
		return nil, e
	}
	if p.det != nil && r.cfg.Sandbox.Reaches(p.netAllow) {
		return nil, badRequest(sandbox.DeterministicNetworkRefusal)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopAfter := context.AfterFunc(r.base, func() { cancel(errors.New("the runner is shutting down")) })
	defer stopAfter()

	var s *session
	var dir string
	if sessionID != "" {
		if s, e = r.acquireSession(ctx, sessionID, func() { cancel(errors.New("the session was deleted")) }); e != nil {
			return nil, e
		}
		defer r.releaseSession(s)
		dir = s.dir
	} else {
		r.mu.Lock()
		r.seq++
		d := filepath.Join(r.runsDir, "run-"+strconv.FormatUint(r.seq, 10))
		r.mu.Unlock()
		if err := r.makeWorkspace(d); err != nil {
			return nil, sandboxFailed("cannot create a workspace: "+err.Error(), err)
		}
		defer r.removeLater(d)
		dir = d
	}

	release, _, err := r.cfg.Slots.Acquire(ctx)
	if err != nil {
		if errors.Is(err, slots.ErrBusy) {
			return nil, &Error{Status: http.StatusTooManyRequests, Message: "all execution slots are busy; retry later", Kind: ErrBusy, Err: err}
		}
		return nil, canceled(ctx)
	}
	defer release()
	resp, e := r.run(ctx, s, dir, p)
	if e != nil {
		r.log.Debug("runner: execute failed", "language", p.rt.Language, "session", sessionID != "", "status", e.Status, "err", e.Message)
		return nil, e
	}
	r.log.Debug("runner: execute", "language", p.rt.Language, "session", sessionID != "",
		"status", deref(resp.Run.Status), "wall_ms", resp.Run.WallTime, "files_out", len(resp.Files))
	return resp, nil
}

func deref(s *string) string {
	if s == nil {
		return "ok"
	}
	return *s
}

// run executes a prepared request in dir. The session (nil for one-off runs) is marked dirty whenever the
// workspace may have been left half-written: see the package documentation.
func (r *Runner) run(ctx context.Context, s *session, dir string, p *prepared) (*ExecuteResponse, *Error) {
	if ctx.Err() != nil { // canceled while queued: nothing has touched the workspace yet
		return nil, canceled(ctx)
	}
	if r.private {
		if e := checkFits(dir, p.files, r.cfg.WorkspaceSize); e != nil {
			return nil, e
		}
	}
	if e, err := writeFiles(dir, p.files); e != nil {
		return nil, e
	} else if err != nil {
		return nil, r.failIn(s, "writing the request's files failed", err)
	}
	stdin, err := r.stdinFile(p.stdin)
	if err != nil {
		return nil, sandboxFailed("cannot prepare stdin: "+err.Error(), err)
	}
	if stdin != nil {
		defer stdin.Close()
	}
	lim := r.runLimits(p.memory, p.cpu)
	lim.NetworkAllow = p.netAllow
	run, err := r.oneBlockRun(lim) // the run stage (a compile is a stage of its own)
	if err != nil {
		return nil, sandboxFailed("sandbox: "+err.Error(), err)
	}
	defer run.CloseLater() // every block was waited for; its init's exit and the cgroups go on behind the reply
	ws, e := r.openWorkspace(s, dir, run)
	if e != nil {
		return nil, e
	}
	defer ws.close()
	// The program sees its workspace at WorkDir, never the host path (LibreChat tells models to write there).
	in := run.Workdir(dir, WorkDir)
	env := append(interp.Env(in, p.rt.interp, r.cfg.Exposed), p.env...)
	var compiled *StageResult
	if p.rt.interp.Compiled() {
		st, ok, e := r.compile(ctx, ws, in, p, env)
		if e != nil {
			return nil, e
		}
		if !ok {
			return &ExecuteResponse{Language: p.rt.Language, Version: p.rt.Version, Compile: st, Run: skippedRun(st)}, nil
		}
		compiled = st
	}
	runPath, argv, err := runArgv(p, in, entry(in, p))
	if err != nil {
		return nil, sandboxFailed("cannot find the program to run: "+err.Error(), err)
	}
	spec, col := ws.spec(sandbox.Spec{Path: runPath, Args: argv, Env: env, Stdin: stdin, Deterministic: p.det}, true)
	max := r.cfg.MaxOutputBytes
	sup, err := execution.Supervise(ctx, run, spec,
		execution.Options{Timeout: p.timeout, Caps: execution.Caps{Stdout: max, Stderr: max}, KillOnOverflow: true, Kills: r.cfg.Kills})
	if err != nil {
		// Start failed before the program was exec'd: nothing ran, the workspace is as we left it.
		return nil, sandboxFailed("sandbox: "+err.Error(), err)
	}
	if sup.Status == execution.SandboxError {
		return nil, ws.fail("the sandbox failed during the run", sup.Err)
	}
	if r.afterRun != nil {
		r.afterRun(dir)
	}
	st := stageResult(sup, "run", p.timeout, max, ctx)
	r.noteEnd(s, sup, st)
	if sup.Status == execution.Cancelled {
		return nil, canceled(ctx)
	}
	if e := ws.collected(col); e != nil {
		return nil, e
	}
	resp := &ExecuteResponse{Language: p.rt.Language, Version: p.rt.Version, Run: st, Compile: compiled,
		Deterministic: deterministicReply(p.det)}
	if e := ws.filesOut(resp, col); e != nil {
		return nil, e
	}
	return resp, nil
}

func entry(in string, p *prepared) string { return path.Join(in, p.files[0].name) }

// noteEnd marks a session dirty after a run whose end leaves its workspace unknown. A run stopped at
// run_timeout or an output cap still gets its reply, which says so: the client knows what happened, as
// after a crash, so the session stays usable (LibreChat's models retry in the same session). Only a run
// whose reply is lost (the caller went away) leaves it unknown.
func (r *Runner) noteEnd(s *session, sup *execution.Supervised, st StageResult) {
	if s == nil {
		return
	}
	switch {
	case sup.Status == execution.Cancelled:
		r.markDirty(s, "the previous execute was killed mid-run ("+*st.Message+")")
	case sup.LimitDesc != "":
		r.markDirty(s, "the previous execute was killed by the sandbox ("+sup.LimitDesc+")")
	}
}

// stageResult is the one table from an outcome to Piston's stage object (stage is "run" or "compile"):
// code or signal, and status and message (status null when the program exited 0 on its own).
func stageResult(o *execution.Supervised, stage string, timeout time.Duration, maxOut int64, ctx context.Context) StageResult {
	st := StageResult{Stdout: string(o.Stdout), Stderr: string(o.Stderr), Output: string(o.Output),
		WallTime: o.Wall.Milliseconds(), CPUTime: o.CPU.Milliseconds(), Memory: o.MaxRSS}
	if o.Signal != 0 {
		name := execution.SignalName(o.Signal)
		st.Signal = &name
	} else {
		code := o.Code
		st.Code = &code
	}
	status, msg := "", ""
	switch {
	case o.Status == execution.WallTimeout:
		status, msg = StatusTimeout, fmt.Sprintf("%s timed out after %d ms", stage, timeout.Milliseconds())
	case o.Status == execution.CPULimit:
		// Piston clients read TO as "took too long", whichever clock ran out.
		status, msg = StatusTimeout, fmt.Sprintf("%s killed at its %s", stage, o.LimitDesc)
	case o.StdoutCut:
		status, msg = StatusStdoutLimit, fmt.Sprintf("stdout length exceeded (limit %d bytes)", maxOut)
	case o.StderrCut:
		status, msg = StatusStderrLimit, fmt.Sprintf("stderr length exceeded (limit %d bytes)", maxOut)
	case o.Status == execution.Cancelled:
		status, msg = StatusInternal, "execution canceled: "+context.Cause(ctx).Error()
	case o.Signal != 0: // Signalled, or a limit's kill (named in the message)
		status, msg = StatusSignal, "killed by signal "+execution.SignalName(o.Signal)
		if o.LimitDesc != "" {
			msg += " (" + o.LimitDesc + ")"
		}
	case o.Code != 0:
		status, msg = StatusRuntimeError, fmt.Sprintf("non-zero exit code %d", o.Code)
	}
	if status != "" {
		st.Status, st.Message = &status, &msg
	}
	return st
}

// stdinFile stages stdin in an unlinked, read-only file (nil for empty stdin, which becomes /dev/null).
// A file rather than a pipe: no writer goroutine, and a program that never reads cannot block anything.
func (r *Runner) stdinFile(data []byte) (*os.File, error) {
	if len(data) == 0 {
		return nil, nil
	}
	w, err := os.CreateTemp(r.runsDir, "stdin-")
	if err != nil {
		return nil, err
	}
	name := w.Name()
	defer os.Remove(name)
	_, err = w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return os.Open(name)
}
