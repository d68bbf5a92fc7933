package runner

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/codellm/codellm/internal/execution"
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

// compile runs the compile stage in the workspace, which the program sees at in. It returns the stage
// result and whether the run may follow.
func (r *Runner) compile(ctx context.Context, ws *workspace, in string, p *prepared, env []string) (*StageResult, bool, *Error) {
	if err := os.MkdirAll(buildDir(ws.dir), 0o700); err != nil {
		return nil, false, sandboxFailed("cannot create the build directory: "+err.Error(), err)
	}
	build := buildDir(in)
	argv := interp.Expand(p.rt.interp.Compile, entry(in, p), build)
	prog, err := interp.LookPath(argv[0])
	if err != nil {
		return nil, false, sandboxFailed("compiler: "+err.Error(), err)
	}
	limits := stageLimits{timeout: p.compileTimeout, memory: p.compileMemory, cpu: p.compileCPU, det: p.det, netAllow: p.netAllow}
	st, status, e := r.stage(ctx, ws, sandbox.Spec{Path: prog, Args: argv, Env: compileEnv(env, build)}, limits)
	if e != nil {
		return nil, false, e
	}
	if status == execution.Cancelled {
		if ws.s != nil {
			r.markDirty(ws.s, "the previous execute was killed mid-compile")
		}
		return nil, false, canceled(ctx)
	}
	return st, st.Status == nil, nil
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
	det     *sandbox.Determinism // deterministic mode (nil: off)

	netAllow *[]string // the request's narrowed egress list (nil: the operator's)
}

// oneBlockRun is a sandbox run for one stage: its one block runs in the run's own cgroup (Run.OneBlock).
func (r *Runner) oneBlockRun(lim *sandbox.Limits) (*sandbox.Run, error) {
	run, err := r.cfg.Sandbox.NewRun(lim)
	if err != nil {
		return nil, err
	}
	run.OneBlock()
	return run, nil
}

// stage runs one sandboxed process (the compile stage) in its own cgroup and captures it like the run
// stage; in the private mode what it leaves in the workspace is kept for the run stage.
func (r *Runner) stage(ctx context.Context, ws *workspace, sp sandbox.Spec, l stageLimits) (*StageResult, execution.Status, *Error) {
	lim := r.runLimits(l.memory, l.cpu)
	lim.NetworkAllow = l.netAllow
	run, err := r.oneBlockRun(lim)
	if err != nil {
		return nil, 0, sandboxFailed("sandbox: "+err.Error(), err)
	}
	defer run.CloseLater() // every block was waited for; its init's exit and the cgroups go on behind the reply
	max := r.cfg.MaxOutputBytes
	sp.Deterministic = l.det
	spec, col := ws.spec(sp, false)
	sup, err := execution.Supervise(ctx, run, spec,
		execution.Options{Timeout: l.timeout, Caps: execution.Caps{Stdout: max, Stderr: max}, KillOnOverflow: true, Kills: r.cfg.Kills})
	if err != nil {
		return nil, 0, sandboxFailed("sandbox: "+err.Error(), err)
	}
	if sup.Status == execution.SandboxError {
		return nil, 0, sandboxFailed("the sandbox failed during the compile: "+sup.Err.Error(), sup.Err)
	}
	if sup.Status != execution.Cancelled {
		if e := ws.collected(col); e != nil {
			return nil, 0, e
		}
	}
	st := stageResult(sup, "compile", l.timeout, max, ctx)
	return &st, sup.Status, nil
}
