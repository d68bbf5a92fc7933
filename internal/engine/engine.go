// Package engine turns markdown into a finished run: it extracts the fenced blocks, resolves them against
// the enabled interpreters, takes an execution slot, runs them as a pipeline in the sandbox and parses the
// last block's stdout into tool calls. The HTTP service, `codellm run` and the step debugger all go through
// it, so the three can never disagree about what a body means.
//
// Errors are typed (the packages' own error types plus the sentinels below); the HTTP layer maps them to the
// OpenAI error envelope in one place (internal/server).
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/markdown"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/slots"
)

// ErrNoCodeBlocks: no scanned message holds a fenced block (422 no_code_blocks).
var ErrNoCodeBlocks = errors.New("no fenced code block found in system or user messages")

// TooManyBlocksError: more blocks than --max-blocks (400 too_many_blocks).
type TooManyBlocksError struct{ Got, Limit int }

func (e *TooManyBlocksError) Error() string {
	return fmt.Sprintf("%d code blocks exceed the limit of %d", e.Got, e.Limit)
}

// SandboxUnavailableError: the startup self-check failed in native mode, so nothing may run (422
// sandbox_unavailable).
type SandboxUnavailableError struct{ Reason string }

func (e *SandboxUnavailableError) Error() string {
	return "sandbox unavailable: " + e.Reason
}

// Config is everything a run needs that does not come from the request.
type Config struct {
	// NetworkAllow is the operator's egress allow-list (--network-allow; nil: none); requests may only
	// narrow it.
	NetworkAllow *egress.Policy
	Programs     *interp.Programs
	Exposed      []string // NAME=value pairs exposed to every block (--expose-env, --expose-env-prefix)
	Pipeline     pipeline.Config
	Slots        *slots.Pool
	Timeout      time.Duration // server maximum run timeout (--timeout)
	MaxBlocks    int
	// Deterministic is the operator's default for deterministic mode (--deterministic); see Determinism.
	Deterministic bool
}

// Engine runs bodies. It is safe for concurrent use.
type Engine struct {
	cfg   Config
	ready func() (ok bool, reason string)
}

// New returns an engine. ready reports the startup self-check; nil means always ready.
func New(cfg Config, ready func() (bool, string)) *Engine {
	if ready == nil {
		ready = func() (bool, string) { return true, "" }
	}
	return &Engine{cfg: cfg, ready: ready}
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Extract finds the blocks of the given messages and enforces the block count (§3).
func (e *Engine) Extract(sources []markdown.Source) ([]markdown.Block, error) {
	blocks, err := markdown.Extract(sources)
	if err != nil {
		return nil, err
	}
	if e.cfg.MaxBlocks > 0 && len(blocks) > e.cfg.MaxBlocks {
		return nil, &TooManyBlocksError{Got: len(blocks), Limit: e.cfg.MaxBlocks}
	}
	if len(blocks) == 0 {
		return nil, ErrNoCodeBlocks
	}
	return blocks, nil
}

// Plan extracts and resolves every block; nothing runs if any step fails (§2.1 steps 6–8).
func (e *Engine) Plan(sources []markdown.Source) ([]interp.Resolved, error) {
	blocks, err := e.Extract(sources)
	if err != nil {
		return nil, err
	}
	resolved, err := e.cfg.Programs.Resolve(blocks)
	if err != nil {
		return nil, err
	}
	if err := e.CheckSandbox(); err != nil {
		return nil, err
	}
	return resolved, nil
}

// CheckSandbox refuses to run in native mode when the startup self-check failed.
func (e *Engine) CheckSandbox() error {
	if e.cfg.Pipeline.Sandbox == nil || e.cfg.Pipeline.Sandbox.Mode() != sandbox.ModeNative {
		return nil
	}
	if ok, reason := e.ready(); !ok {
		return &SandboxUnavailableError{Reason: reason}
	}
	return nil
}

// Steps converts resolved blocks into pipeline steps with the operator's whole exposure.
func (e *Engine) Steps(resolved []interp.Resolved) []pipeline.Step {
	return e.steps(resolved, e.cfg.Exposed)
}

// steps converts resolved blocks into pipeline steps whose blocks see exposed.
func (e *Engine) steps(resolved []interp.Resolved, exposed []string) []pipeline.Step {
	steps := make([]pipeline.Step, len(resolved))
	for i, r := range resolved {
		in := r.Interp
		steps[i] = pipeline.Step{
			Lang:    r.Block.Label,
			Program: in.Name,
			Path:    r.Path,
			Args:    append([]string(nil), in.Cmd...),
			Ext:     in.Ext,
			Code:    r.Block.Code,
			Env: func(dir string) []string {
				return interp.Env(dir, in, exposed)
			},
		}
	}
	return steps
}

// EffectiveTimeout applies a request's timeout_seconds: 0 means the server maximum, larger values are
// clamped to it (a request never extends the server maximum).
func (e *Engine) EffectiveTimeout(seconds int) time.Duration {
	max := e.cfg.Timeout
	if seconds <= 0 {
		return max
	}
	d := time.Duration(seconds) * time.Second
	if max > 0 && d > max {
		return max
	}
	return d
}

// RunRequest describes one execution.
type RunRequest struct {
	Resolved []interp.Resolved
	Input    []byte // the bag; nil = "{}"
	Stdin    []byte // first block's stdin (debugger only)
	Timeout  time.Duration
	Tap      bool
	// NetworkAllow narrows the operator's egress allow-list for this run (nil: all of it); check it with
	// CheckNetworkAllow first.
	NetworkAllow *[]string
	// Deterministic makes the run reproducible (nil: off); resolve a request's choice with Determinism.
	Deterministic *sandbox.Determinism
	// Progress is told of each block's start and exit (pipeline.Request.Progress); it must not block.
	Progress func(pipeline.Progress)
}

// CheckNetworkAllow validates a request's egress list: it must be a subset of the operator's.
func (e *Engine) CheckNetworkAllow(list []string) error {
	if e.cfg.NetworkAllow == nil {
		return fmt.Errorf("%w: this server has no egress allow-list (--network-allow)", egress.ErrPolicy)
	}
	_, err := e.cfg.NetworkAllow.Narrow(list)
	return err
}

// RunInfo reports how the run went besides its result.
type RunInfo struct {
	QueueWait time.Duration
	Duration  time.Duration
}

// Run takes a slot (slots.ErrBusy after the queue timeout) and runs the pipeline. The returned result is
// never nil when err is nil; its Err field carries execution failures.
func (e *Engine) Run(ctx context.Context, rr RunRequest) (*pipeline.Result, RunInfo, error) {
	var info RunInfo
	// trip2g's per-role env: the bag's env_passthrough/env_prefix narrow the operator's exposure.
	exposed, err := interp.Narrow(e.cfg.Exposed, rr.Input)
	if err != nil {
		return nil, info, err
	}
	if e.cfg.Slots != nil {
		release, waited, err := e.cfg.Slots.Acquire(ctx)
		info.QueueWait = waited
		if err != nil {
			return nil, info, err
		}
		defer release()
	}
	if rr.Deterministic != nil && e.cfg.Pipeline.Sandbox != nil && e.cfg.Pipeline.Sandbox.Reaches(rr.NetworkAllow) {
		return nil, info, &DeterminismError{Msg: sandbox.DeterministicNetworkRefusal}
	}
	timeout := rr.Timeout
	if timeout <= 0 {
		timeout = e.cfg.Timeout
	}
	start := time.Now()
	var lim *sandbox.Limits
	if rr.NetworkAllow != nil {
		lim = &sandbox.Limits{NetworkAllow: rr.NetworkAllow}
	}
	res := pipeline.Run(ctx, e.cfg.Pipeline, pipeline.Request{
		Steps:   e.steps(rr.Resolved, exposed),
		Input:   rr.Input,
		Stdin:   rr.Stdin,
		Timeout: timeout,
		Tap:     rr.Tap,
		Limits:  lim,

		Deterministic: rr.Deterministic,
		Progress:      rr.Progress,
	})
	info.Duration = time.Since(start)
	return res, info, nil
}

// Answer parses a successful run's stdout and checks the offered tools (§9, §10.2).
func Answer(stdout []byte, offered []string) ([]contract.ToolCall, error) {
	out, err := contract.Parse(stdout)
	if err != nil {
		return nil, err
	}
	if err := contract.CheckTools(offered, out); err != nil {
		return nil, err
	}
	return out.ToolCalls(), nil
}

// RunEmpty runs an empty code file of the named program: the startup self-check (§1.3). It bypasses the
// slot pool so that a busy server can still re-check itself.
func (e *Engine) RunEmpty(ctx context.Context, program string) (*pipeline.Result, error) {
	in, ok := e.cfg.Programs.Registry().ByName(program)
	if !ok || len(in.Labels) == 0 || e.cfg.Programs.Path(program) == "" {
		return nil, fmt.Errorf("program %q is not enabled", program)
	}
	resolved, err := e.cfg.Programs.Resolve([]markdown.Block{{Label: in.Labels[0]}})
	if err != nil {
		return nil, err
	}
	timeout := 30 * time.Second
	if e.cfg.Timeout > 0 && e.cfg.Timeout < timeout {
		timeout = e.cfg.Timeout
	}
	return pipeline.Run(ctx, e.cfg.Pipeline, pipeline.Request{Steps: e.Steps(resolved), Timeout: timeout}), nil
}

// SelfCheck runs an empty file of every enabled interpreter that the pipeline runs (§1.3) and returns why
// the sandbox cannot run them ("" when all pass), logging the result. Compiled languages (LibreChat's, on
// the runner API only) and java (an empty source is not a program: its source-file mode needs a class)
// are skipped: the runner's tests cover them. The server records the result for /readyz; the worker
// refuses to register on a failure.
func (e *Engine) SelfCheck(ctx context.Context, log *slog.Logger) string {
	names := []string{}
	if e.cfg.Programs != nil {
		names = e.cfg.Programs.Names()
	}
	reason := ""
	for _, name := range names {
		if in, ok := e.cfg.Programs.Registry().ByName(name); ok && (in.Compiled() || name == "java") {
			continue
		}
		res, err := e.RunEmpty(ctx, name)
		if err != nil {
			reason = fmt.Sprintf("self-check of %s failed: %v", name, err)
			break
		}
		if res.Err != nil {
			reason = fmt.Sprintf("self-check of %s failed: %s", name, res.Err.Message)
			break
		}
	}
	if reason != "" {
		log.Error("sandbox self-check failed", "reason", reason)
	} else {
		log.Info("sandbox self-check passed", "programs", strings.Join(names, ","))
	}
	return reason
}

// SweepStale removes the run directories (code and delivery bags) a crashed codellm process left under the
// pipeline's work root; call it once before the first run.
func (e *Engine) SweepStale(log *slog.Logger) {
	removed, errs := pipeline.SweepStale(e.cfg.Pipeline.WorkRoot)
	for _, d := range removed {
		log.Info("removed a stale run directory of a dead codellm process", "dir", d)
	}
	for _, err := range errs {
		log.Warn("cannot sweep stale run directories", "err", err)
	}
}
