package runner

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/sandbox"
)

// The compile stage of compiled languages (interp.Interpreter.Compile), as Piston runs it: the compile
// command in the sandbox, in the workspace, with its own limits (compile_timeout, compile_cpu_time,
// compile_memory_limit) in a cgroup of its own, its output in the reply's "compile"; a compile that
// does not exit 0 skips the run. Build products and compiler caches go to <workspace>/tmp/.build
// (scratch: never listed in files out), and the compile environment points the caches that default to
// $HOME there (Go's GOCACHE and GOPATH, XDG_CACHE_HOME).

// buildDir is the build directory inside a workspace.
func buildDir(dir string) string { return filepath.Join(dir, scratchDir, ".build") }

// compileEnv is the compile stage's environment: the run environment plus the cache locations.
func compileEnv(env []string, build string) []string {
	cache := filepath.Join(build, ".cache")
	return append(env, "XDG_CACHE_HOME="+cache, "GOCACHE="+filepath.Join(cache, "go-build"),
		"GOPATH="+filepath.Join(build, "go"), "GOFLAGS=-buildvcs=false", "GO111MODULE=auto")
}

// compile runs the compile stage in the workspace dir, which the program sees at in. It returns the stage
// result and whether the run may follow.
func (r *Runner) compile(ctx context.Context, s *session, dir, in string, p *prepared, env []string) (*StageResult, bool, *Error) {
	if err := os.MkdirAll(buildDir(dir), 0o700); err != nil {
		return nil, false, sandboxFailed("cannot create the build directory: "+err.Error(), err)
	}
	build := buildDir(in)
	entry := path.Join(in, p.files[0].name)
	argv := interp.Expand(p.rt.interp.Compile, entry, build)
	prog, err := interp.LookPath(argv[0])
	if err != nil {
		return nil, false, sandboxFailed("compiler: "+err.Error(), err)
	}
	limits := stageLimits{timeout: p.compileTimeout, memory: p.compileMemory, cpu: p.compileCPU}
	st, killed, res, e := r.stage(ctx, prog, argv, compileEnv(env, build), dir, nil, limits)
	if e != nil {
		return nil, false, e
	}
	if s != nil && killed == "canceled" {
		r.markDirty(s, "the previous execute was killed mid-compile")
	}
	if killed == "canceled" {
		return nil, false, canceled(ctx)
	}
	return st, st.Status == nil && res.ExitCode == 0, nil
}

// runArgv is the run stage's program and argv (with in the workspace as the program sees it): Run
// expanded for compiled languages, cmd + entry otherwise, then the request's args.
func runArgv(p *prepared, in, entry string) (string, []string, error) {
	if !p.rt.interp.Compiled() {
		return p.rt.path, append(append(append([]string{}, p.rt.interp.Cmd...), entry), p.args...), nil
	}
	argv := append(interp.Expand(p.rt.interp.Run, entry, buildDir(in)), p.args...)
	if filepath.IsAbs(argv[0]) {
		return argv[0], argv, nil
	}
	path, err := interp.LookPath(argv[0])
	return path, argv, err
}

// skippedRun is the run stage of a request whose compile failed: nothing ran.
func skippedRun(c *StageResult) StageResult {
	status, msg := StatusRuntimeError, "compilation failed; the program was not run"
	if c.Status != nil && *c.Status != StatusRuntimeError {
		msg = "compilation stopped (" + deref(c.Message) + "); the program was not run"
	}
	return StageResult{Code: c.Code, Signal: c.Signal, Status: &status, Message: &msg}
}

type stageLimits struct {
	timeout time.Duration
	memory  int64
	cpu     time.Duration
}

// stage runs one sandboxed process in its own cgroup and captures it like the run stage. killed is why
// codellm stopped it ("timeout", "output", "canceled" or "").
func (r *Runner) stage(ctx context.Context, prog string, argv, env []string, dir string, stdin *os.File, l stageLimits) (*StageResult, string, sandbox.Result, *Error) {
	run, err := r.cfg.Sandbox.NewRun(&sandbox.Limits{Memory: l.memory, CPUTime: l.cpu})
	if err != nil {
		return nil, "", sandbox.Result{}, sandboxFailed("sandbox: "+err.Error(), err)
	}
	defer run.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, "", sandbox.Result{}, sandboxFailed("cannot create pipes: "+err.Error(), err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, "", sandbox.Result{}, sandboxFailed("cannot create pipes: "+err.Error(), err)
	}
	proc, err := run.Start(sandbox.Spec{Path: prog, Args: argv, Env: env, Dir: dir, MountAt: WorkDir, Persist: true, Stdin: stdin, Stdout: outW, Stderr: errW})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, "", sandbox.Result{}, sandboxFailed("sandbox: "+err.Error(), err)
	}
	capt := newCapture(r.cfg.MaxOutputBytes)
	capt.start(outR, errR)
	waitc := make(chan sandbox.Result, 1)
	go func() { waitc <- proc.Wait() }()
	timer := time.NewTimer(l.timeout)
	defer timer.Stop()
	var killed string
	var res sandbox.Result
	select {
	case res = <-waitc:
	case <-timer.C:
		killed = "timeout"
	case <-capt.overflow:
		killed = "output"
	case <-ctx.Done():
		killed = "canceled"
	}
	if killed != "" {
		run.Kill()
		if res = <-waitc; res.Signal == 0 {
			killed = ""
		}
	}
	capt.finish(killGrace)
	if res.Err != nil {
		return nil, "", res, sandboxFailed("the sandbox failed during the compile: "+res.Err.Error(), res.Err)
	}
	return r.stageResult(capt, res, killed, l.timeout, ctx), killed, res, nil
}

// stageResult builds Piston's stage object from a finished process.
func (r *Runner) stageResult(capt *capture, res sandbox.Result, killed string, timeout time.Duration, ctx context.Context) *StageResult {
	stdout, stderr, output, overOut, overErr := capt.result()
	st := &StageResult{Stdout: stdout, Stderr: stderr, Output: output,
		WallTime: res.Wall.Milliseconds(), CPUTime: res.CPU.Milliseconds(), Memory: res.MaxRSS}
	if res.Signal != 0 {
		name := signalName(res.Signal)
		st.Signal = &name
	} else {
		code := res.ExitCode
		st.Code = &code
	}
	status, msg := "", ""
	switch {
	case killed == "timeout":
		status, msg = StatusTimeout, fmt.Sprintf("compile timed out after %d ms", timeout.Milliseconds())
	case overOut:
		status, msg = StatusStdoutLimit, fmt.Sprintf("stdout length exceeded (limit %d bytes)", r.cfg.MaxOutputBytes)
	case overErr:
		status, msg = StatusStderrLimit, fmt.Sprintf("stderr length exceeded (limit %d bytes)", r.cfg.MaxOutputBytes)
	case killed == "canceled":
		status, msg = StatusInternal, "execution canceled: "+context.Cause(ctx).Error()
	case res.Signal != 0:
		status, msg = StatusSignal, "killed by signal "+signalName(res.Signal)
		if res.LimitDesc != "" {
			msg += " (" + res.LimitDesc + ")"
		}
	case res.ExitCode != 0:
		status, msg = StatusRuntimeError, fmt.Sprintf("non-zero exit code %d", res.ExitCode)
	}
	if status != "" {
		st.Status, st.Message = &status, &msg
	}
	return st
}
