package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/execution"
	"github.com/codellm/codellm/internal/sandbox"
)

// Defaults from openai-contract.md §6.
const (
	DefaultKillGrace = 5 * time.Second
	// BlockDir is where every block finds its workdir inside a native sandbox (with a private root): a
	// fixed path, so no host directory shows in $PWD, argv or tracebacks. Elsewhere it is the host path.
	BlockDir              = "/mnt/data"
	DefaultMaxOutputBytes = 1 << 20
	DefaultMaxStderrBytes = 64 << 10
	// DefaultTimeout applies when a Request carries no timeout; the server always passes its effective one.
	DefaultTimeout = 300 * time.Second
	// StderrTailBytes is how much of a failing block's stderr goes into its error message (§5.3).
	StderrTailBytes = 4096
	// maxExtLen bounds Step.Ext; real extensions are a few bytes.
	maxExtLen = 32
)

// Step is one block to run: a resolved program and its code.
type Step struct {
	Lang, Program string // for reports only
	// Path is the absolute host path of the program (resolved by the caller).
	Path string
	// Args is the argv prefix, Args[0] included (e.g. ["python3", "-u"]); the pipeline appends the
	// absolute path of run<ext>. Empty means [Path].
	Args []string
	// Ext is the code file's extension including the dot (".py"); "" is allowed.
	Ext  string
	Code string
	// Env returns the complete child environment for the block's workdir (§7). Nil means DefaultEnv.
	Env func(workdir string) []string
}

// Config is the per-server configuration of the pipeline.
type Config struct {
	Sandbox *sandbox.Sandbox
	// WorkRoot is the parent directory of run directories (default os.TempDir()); each run gets a fresh
	// 0700 directory below it, removed when the run ends.
	WorkRoot       string
	KillGrace      time.Duration // default 5s
	MaxOutputBytes int64         // captured stdout cap per block and per tap (default 1 MiB)
	// MaxStderrBytes caps captured stderr per block (default 64 KiB): the LAST bytes are kept, prefixed
	// with "[codellm: N bytes of stderr dropped]\n".
	MaxStderrBytes int64
	// Kills counts each started block a limit or codellm ended in codellm_kills_total (nil: not counted).
	Kills execution.KillCounter
}

// Request is one pipeline run.
type Request struct {
	Steps []Step
	// Input is written to input.json in every block's workdir ("{}" when nil).
	Input []byte
	// Stdin is the first block's stdin (nil = empty, immediate EOF).
	Stdin []byte
	// Timeout is the whole-run timeout counted from when Run is called (0 = DefaultTimeout).
	Timeout time.Duration
	// Tap records every edge (§5.4) and every block's stdout.
	Tap bool
	// Limits are the sandbox limits of the run (nil = the sandbox's configured limits).
	Limits *sandbox.Limits
	// Deterministic makes every block reproducible (nil: off); see sandbox.Determinism.
	Deterministic *sandbox.Determinism
	// Progress, when set, is told of each block's start and exit as they happen (the chat stream's
	// progress events). It is called from the run's own goroutine: it must not block.
	Progress func(Progress)
}

// Progress is one block starting or exiting.
type Progress struct {
	Exited   bool // false: the block started
	Index    int  // 0-based
	Blocks   int
	ExitCode int    // after an exit: the status, or -1 when a signal ended it
	Signal   string // after an exit by a signal: its name ("SIGKILL")
	Wall     time.Duration
}

// Outcome is how one block ended (§5.3).
type Outcome string

// The outcomes of §5.3.
const (
	OutcomeOK           Outcome = "ok"
	OutcomeExcused      Outcome = "excused"
	OutcomeCancelled    Outcome = "cancelled"
	OutcomeFailed       Outcome = "failed"
	OutcomeTimedOut     Outcome = "timed_out"
	OutcomeOutputLimit  Outcome = "output_limit"
	OutcomeSandboxError Outcome = "sandbox_error"
)

// Failing reports whether the outcome fails the run.
func (o Outcome) Failing() bool {
	switch o {
	case OutcomeFailed, OutcomeTimedOut, OutcomeOutputLimit, OutcomeSandboxError:
		return true
	}
	return false
}

// BlockResult reports one block; the fields map onto the x_codellm_debug block object (§13).
type BlockResult struct {
	Index         int // 0-based
	Lang, Program string
	Outcome       Outcome
	Status        execution.Status // how its process ended (what the metric reasons are read from)
	ExitCode      *int             // nil when a signal ended the block or it never ran
	Signal        string           // e.g. "SIGSEGV"; "" when it exited
	Duration      time.Duration
	CPU           time.Duration // user+sys of the block and its reaped descendants
	MaxRSS        int64
	Limit         string // the sandbox's description of the limit that ended it, e.g. "memory limit 512 MiB"
	// Stdout is captured for the last block always and for every block when tapped (an intermediate
	// block's Stdout then equals its PipeBuffer).
	Stdout          []byte
	StdoutTruncated bool
	Stderr          []byte // captured tail per §6
	// PipeBuffer is the tap of the edge after this block (Tap only, intermediate blocks).
	PipeBuffer    []byte
	PipeTruncated bool

	// Setup is how long the sandbox took to start the block, up to its program being exec'd (0 when it
	// never started); it feeds codellm_sandbox_setup_seconds.
	Setup time.Duration
}

// Error codes, as mapped by the server to 422 codes (cancelled: no reply).
const (
	CodeNonzeroExit        = "nonzero_exit"
	CodeTimeout            = "timeout"
	CodeOutputLimit        = "output_limit"
	CodeSandboxUnavailable = "sandbox_unavailable"
	CodeCancelled          = "cancelled"
	// CodeInvalid is a programming error of the caller (bad Config or Request); the server validates
	// requests before they reach the pipeline, so it maps this to an internal error.
	CodeInvalid = "invalid_pipeline"
)

// Sentinels matched by errors.Is against *Error, one per code.
var (
	ErrNonzeroExit        = errors.New("pipeline: block failed")
	ErrTimeout            = errors.New("pipeline: timed out")
	ErrOutputLimit        = errors.New("pipeline: output limit exceeded")
	ErrSandboxUnavailable = errors.New("pipeline: sandbox unavailable")
	ErrCancelled          = errors.New("pipeline: cancelled")
	ErrInvalid            = errors.New("pipeline: invalid configuration or request")
)

var codeSentinel = map[string]error{
	CodeNonzeroExit:        ErrNonzeroExit,
	CodeTimeout:            ErrTimeout,
	CodeOutputLimit:        ErrOutputLimit,
	CodeSandboxUnavailable: ErrSandboxUnavailable,
	CodeCancelled:          ErrCancelled,
	CodeInvalid:            ErrInvalid,
}

// Error is why a run failed. Message is the exact client-facing text of §5.3 ("block 2/3: ...").
type Error struct {
	Code    string
	Message string
	Block   int   // 0-based index of the reported block; -1 when no block is concerned
	Cause   error // the sandbox's error for sandbox_unavailable, else nil
}

func (e *Error) Error() string { return e.Message }

// Is matches the sentinel of e.Code.
func (e *Error) Is(target error) bool { return codeSentinel[e.Code] == target }

// Unwrap exposes the sandbox cause (so errors.Is(err, sandbox.ErrUnavailable) holds when it should).
func (e *Error) Unwrap() error { return e.Cause }

// Result is the outcome of a run. Err is nil exactly when the run succeeded.
type Result struct {
	Blocks []BlockResult
	Stdout []byte // last block's captured stdout
	Err    *Error
}

// DefaultEnv is the §7 environment without interpreter or exposed variables: what a block gets when its
// Step has no Env function.
func DefaultEnv(workdir string) []string {
	input := filepath.Join(workdir, "input.json")
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + workdir,
		"TMPDIR=" + filepath.Join(workdir, "tmp"),
		"LANG=C.UTF-8",
		"FLEET_INPUT=" + input,
		"CODELLM_INPUT=" + input,
	}
}

func (c Config) withDefaults() Config {
	if c.WorkRoot == "" {
		c.WorkRoot = os.TempDir()
	}
	if c.KillGrace <= 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxStderrBytes <= 0 {
		c.MaxStderrBytes = DefaultMaxStderrBytes
	}
	return c
}

func validate(cfg Config, req Request) error {
	if cfg.Sandbox == nil {
		return errors.New("pipeline: Config.Sandbox is nil")
	}
	if req.Timeout < 0 {
		return fmt.Errorf("pipeline: negative timeout %v", req.Timeout)
	}
	if len(req.Steps) == 0 {
		return errors.New("pipeline: no steps")
	}
	for i, s := range req.Steps {
		if !filepath.IsAbs(s.Path) {
			return fmt.Errorf("pipeline: step %d: program path %q is not absolute", i, s.Path)
		}
		// Ext becomes part of a file name inside the workdir: anything that could name another
		// directory, or that the kernel cannot take in a path, is refused.
		if len(s.Ext) > maxExtLen || strings.ContainsAny(s.Ext, "/\x00") || (s.Ext != "" && s.Ext[0] != '.') ||
			s.Ext == "." || s.Ext == ".." {
			return fmt.Errorf("pipeline: step %d: bad extension %q", i, s.Ext)
		}
	}
	return nil
}

// stderrTail is the §5.3 message tail: the last StderrTailBytes of captured stderr with trailing
// whitespace removed, prefixed with "…" when cut (at a UTF-8 boundary, so the message stays valid text).
func stderrTail(stderr []byte) string {
	s := strings.TrimRight(string(stderr), " \t\r\n\v\f")
	if len(s) <= StderrTailBytes {
		return s
	}
	cut := len(s) - StderrTailBytes
	for cut < len(s) && s[cut]&0xC0 == 0x80 { // skip UTF-8 continuation bytes
		cut++
	}
	return "…" + s[cut:]
}
