package workspace

import (
	"context"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codellm/codellm/internal/execution"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// execute_command limits (§9.2, §9.8).
const (
	maxCommandBytes       = 32 << 10
	defaultTimeoutMs      = 30000
	maxTimeoutMs          = 300000
	defaultMaxOutputBytes = 262144
	maxMaxOutputBytes     = 1 << 20
	commandShell          = "/bin/bash"
)

// reapGrace is how long after timeoutMs the process tree may take to be confirmed gone (§9.8: timeoutMs + 5 s).
var reapGrace = 5 * time.Second

// waitReaped returns once the sandbox confirms that the command's process tree is gone (sandbox.Process.Wait
// returns only when the block and every descendant have been reaped). It is the one source of that
// confirmation, so tests can withhold it and drive the COMMAND_TIMEOUT path without depending on how fast a
// killed process dies.
var waitReaped = func(p *sandbox.Process) sandbox.Result { return p.Wait() }

// ExecuteCommandRequest is the §9.2 execute_command request.
type ExecuteCommandRequest struct {
	envelope
	Command        string  `json:"command"`
	Cwd            *string `json:"cwd,omitempty"`
	TimeoutMs      *int    `json:"timeoutMs,omitempty"`
	MaxOutputBytes *int    `json:"maxOutputBytes,omitempty"`
}

// ExecuteCommandResult is the §9.2 execute_command result. ExitCode is null iff TimedOut or Signal is set.
type ExecuteCommandResult struct {
	ExitCode  *int   `json:"exitCode"`
	Signal    string `json:"signal,omitempty"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timedOut"`
}

// commandsUsable says why execute_command cannot run, or nil. There is never a host-shell fallback: no
// sandbox, or an "off" sandbox the operator did not explicitly accept, means COMMAND_DISABLED.
func (w *Workspace) commandsUsable() error {
	sb := w.opts.Sandbox
	switch {
	case !w.opts.AllowCommands:
		return newErr(CodeCommandDisabled, "commands are not enabled for this workspace")
	case w.opts.CommandRunner != nil:
		return nil
	case sb == nil:
		return newErr(CodeCommandDisabled, "no command sandbox is configured; commands never run in a host shell")
	case sb.Mode() == sandbox.ModeOff && !w.opts.AllowUnconfinedCommands:
		return newErr(CodeCommandDisabled, "the command sandbox is off; enabling unconfined commands must be an explicit operator choice")
	case sb.Config().Network:
		return newErr(CodeCommandDisabled, "the command sandbox allows network access; workspace commands require a sandbox without network")
	}
	return nil
}

// commandEnv is §9.8's reduced environment. HOME points at the private TMPDIR: the user's home directory is
// never visible to a command.
func commandEnv(tmp string) []string {
	env := []string{
		"HOME=" + tmp, "TMPDIR=" + tmp, "PATH=/usr/local/bin:/usr/bin:/bin", "SHELL=" + commandShell,
		"USER=codellm", "LOGNAME=codellm", "TERM=dumb", "NO_COLOR=1", "LANG=C.UTF-8",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "COLORTERM" || strings.HasPrefix(k, "LC_") {
			env = append(env, kv)
		}
	}
	return env
}

// ExecuteCommand implements execute_command (§9.8): `/bin/bash -c command` inside the sandbox, with the
// workspace root bind-mounted read-write as the only writable host directory, stdin /dev/null, one command at
// a time, and everything the command started killed when it ends.
func (w *Workspace) ExecuteCommand(ctx context.Context, r *ExecuteCommandRequest) (*ExecuteCommandResult, error) {
	if err := w.commandsUsable(); err != nil {
		return nil, err
	}
	switch {
	case strings.TrimSpace(r.Command) == "":
		return nil, newErr(CodeInvalidRequest, "command must not be blank")
	case len(r.Command) > maxCommandBytes:
		return nil, newErr(CodeInvalidRequest, "command is longer than 32 KiB")
	case strings.IndexByte(r.Command, 0) >= 0:
		return nil, newErr(CodeInvalidRequest, "command must not contain NUL")
	case !utf8.ValidString(r.Command):
		return nil, newErr(CodeInvalidRequest, "command is not valid UTF-8")
	}
	timeoutMs, maxOut := defaultTimeoutMs, defaultMaxOutputBytes
	if r.TimeoutMs != nil {
		if *r.TimeoutMs < 1 || *r.TimeoutMs > maxTimeoutMs {
			return nil, newErr(CodeInvalidRequest, "timeoutMs must be between 1 and 300000")
		}
		timeoutMs = *r.TimeoutMs
	}
	if r.MaxOutputBytes != nil {
		if *r.MaxOutputBytes < 1 || *r.MaxOutputBytes > maxMaxOutputBytes {
			return nil, newErr(CodeInvalidRequest, "maxOutputBytes must be between 1 and 1048576")
		}
		maxOut = *r.MaxOutputBytes
	}
	cwd := ""
	if r.Cwd != nil {
		var err error
		if cwd, err = cleanPath(*r.Cwd); err != nil {
			return nil, err
		}
	}
	// One command at a time per workspace; waiting respects cancellation.
	if err := w.acquireCommand(ctx); err != nil {
		return nil, err
	}
	// The slot is normally released on return; runCommand takes it over when a process tree outlives the
	// call, so that no new command starts while an old one may still be running.
	handedOff := false
	defer func() {
		if !handedOff {
			w.releaseCommand()
		}
	}()
	if err := w.checkRoot(); err != nil {
		return nil, err
	}
	si, err := w.res.stat(cwd)
	if err != nil {
		return nil, pathError(err, cwd, CodeInvalidPath)
	}
	if !si.mode.IsDir() {
		return nil, newErr(CodeInvalidPath, "cwd is not a directory: "+displayPath(cwd))
	}
	if cr := w.opts.CommandRunner; cr != nil {
		return cr.RunCommand(ctx, Command{Command: r.Command, Cwd: cwd, TimeoutMs: timeoutMs, MaxOutputBytes: maxOut})
	}
	return w.runCommand(ctx, r.Command, cwd, time.Duration(timeoutMs)*time.Millisecond, maxOut, &handedOff)
}

func (w *Workspace) acquireCommand(ctx context.Context) error {
	w.cmdOnce.Do(func() { w.cmdSem = make(chan struct{}, 1) })
	select {
	case w.cmdSem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx)
	}
}

func (w *Workspace) releaseCommand() { <-w.cmdSem }

func (w *Workspace) runCommand(ctx context.Context, command, cwd string, timeout time.Duration, maxOut int, handedOff *bool) (*ExecuteCommandResult, error) {
	sb := w.opts.Sandbox
	// TMPDIR: in native mode /tmp is the block's own size-limited tmpfs and the wrapper creates a 0700
	// directory in it; otherwise a fresh 0700 directory on the host, removed afterwards.
	tmp := "/tmp/codellm-tmp"
	if sb.Mode() != sandbox.ModeNative {
		d, err := os.MkdirTemp("", "codellm-cmd-")
		if err != nil {
			return nil, newErr(CodeCommandUnavailable, "cannot create the command's TMPDIR: "+errnoText(err))
		}
		defer os.RemoveAll(d)
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, newErr(CodeCommandUnavailable, "cannot secure the command's TMPDIR: "+errnoText(err))
		}
		tmp = d
	}
	// The sandbox's working directory is the root (the bind mount). A small wrapper, running inside the
	// sandbox, creates TMPDIR and enters cwd, then replaces itself with the user's shell; the user's command is
	// passed as an argument, never spliced into the script.
	dir := cwd
	if dir == "" {
		dir = "."
	}
	args := []string{commandShell, "-c", commandWrapper, "codellm", dir, command}

	run, err := sb.NewRun(nil)
	if err != nil {
		return nil, newErr(CodeCommandUnavailable, "sandbox: "+w.scrub(err.Error()))
	}
	run.OneBlock()
	hook("command-start")
	sup, err := execution.Supervise(ctx, run, sandbox.Spec{
		Path: commandShell, Args: args, Env: commandEnv(tmp), Dir: w.real, Persist: true,
		AsDirOwner: true, ReadOnly: !w.opts.AllowWrites, // never chown the user's tree; a command writes only with --allow-writes
	}, execution.Options{Timeout: timeout, Caps: execution.Caps{Shared: int64(maxOut)}, ReapGrace: reapGrace, Wait: waitReaped})
	if err != nil {
		// Nothing ran: the failure is atomic.
		return nil, newErr(CodeCommandUnavailable, "sandbox: "+w.scrub(err.Error()))
	}
	if sup.Unreaped {
		// The tree could not be confirmed dead: the cleanup goes on (holding the command slot until it is
		// done); report may-have-committed.
		*handedOff = true
		go func() { <-sup.Done; w.releaseCommand() }()
		return nil, committedErr(CodeCommandTimeout, "the command's processes could not be confirmed reaped")
	}
	return w.commandResult(sup)
}

// commandResult is the one table from an outcome to the §9.2 result (or its error).
func (w *Workspace) commandResult(sup *execution.Supervised) (*ExecuteCommandResult, error) {
	switch sup.Status {
	case execution.Cancelled:
		return nil, committedErr(CodeExecutionAborted, "the command was cancelled")
	case execution.SandboxError:
		return nil, committedErr(CodeCommandUnavailable, "sandbox failed while the command ran: "+w.scrub(sup.Err.Error()))
	}
	out := &ExecuteCommandResult{
		Stdout: captured(sup.Stdout, sup.StdoutCut), Stderr: captured(sup.Stderr, sup.StderrCut),
		Truncated: sup.StdoutCut || sup.StderrCut, TimedOut: sup.Status == execution.WallTimeout,
	}
	switch {
	case out.TimedOut:
	case sup.Signal != 0:
		out.Signal = execution.SignalName(sup.Signal)
	default:
		code := sup.Code
		if code < 0 || code > 255 {
			code = 1
		}
		out.ExitCode = &code
	}
	return out, nil
}

// captured is a stream's text; a stream that was cut loses the incomplete UTF-8 sequence at its end.
func captured(b []byte, cut bool) string {
	if cut {
		b = trimIncompleteUTF8(b)
	}
	return string(b)
}

// commandWrapper runs as `bash -c commandWrapper codellm DIR COMMAND` inside the sandbox.
const commandWrapper = `mkdir -p -m 700 -- "$TMPDIR" || exit 1; cd -- "$1" || exit 1; exec ` + commandShell + ` -c "$2"`

// scrub removes host paths (the root, the home directory) from a sandbox message: errors never show them.
func (w *Workspace) scrub(msg string) string {
	msg = strings.ReplaceAll(msg, w.real, "<workspace>")
	if home := w.opts.HomeDir; home != "" && home != "/" {
		msg = strings.ReplaceAll(msg, home, "<home>")
	}
	return wire.ClipUTF16(msg, 1000)
}

func trimIncompleteUTF8(b []byte) []byte {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return b // ASCII: complete
		}
		if c >= 0xC0 { // a lead byte: complete only if its sequence fits
			need, _, _ := utf8Lead(c)
			if need+1 > i {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
