package debugger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/apierror"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/markdown"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
)

// Sentinels of the step-session errors; the HTTP layer maps each to its §14.3 status and code.
var (
	// ErrSessionDone: the last block already succeeded (409 session_done).
	ErrSessionDone = errors.New("session is done: every block has run; reset it to step again")
	// ErrStepInProgress: another request is stepping or editing the session (409 step_in_progress).
	ErrStepInProgress = errors.New("a step of this session is in progress")
	// ErrSessionNotFound: unknown, deleted or expired id (404 session_not_found).
	ErrSessionNotFound = errors.New("session not found (unknown, deleted or expired)")
	// ErrTooManySessions: the --debug-max-sessions cap is reached (429 too_many_sessions).
	ErrTooManySessions = errors.New("too many debug sessions")
	// ErrBlockOutOfRange: run-block named a block the body does not have (400 block_out_of_range).
	ErrBlockOutOfRange = errors.New("block index out of range")
	// ErrBufferTooLarge: an edited buffer is larger than --max-output-bytes (413).
	ErrBufferTooLarge = errors.New("buffer too large")
)

// RangeError is a block index outside the body; it matches ErrBlockOutOfRange.
type RangeError struct{ Index, Have int }

func (e *RangeError) Error() string {
	return fmt.Sprintf("block index %d out of range (have %d blocks)", e.Index, e.Have)
}

// Is makes errors.Is(err, ErrBlockOutOfRange) hold.
func (e *RangeError) Is(target error) bool { return target == ErrBlockOutOfRange }

// BufferSizeError is an edited buffer over the cap; it matches ErrBufferTooLarge.
type BufferSizeError struct{ Size, Limit int64 }

func (e *BufferSizeError) Error() string {
	return fmt.Sprintf("buffer of %d bytes exceeds --max-output-bytes (%d)", e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrBufferTooLarge) hold.
func (e *BufferSizeError) Is(target error) bool { return target == ErrBufferTooLarge }

// BlockInfo is one listed block (§14.2). A block that cannot run says why in Error/ErrorCode instead of
// failing the listing, so an author sees every problem of a body at once.
type BlockInfo struct {
	Index     int    `json:"index"`
	Lang      string `json:"lang"`
	Program   string `json:"program"`
	Allowed   bool   `json:"allowed"`
	Code      string `json:"code"`
	Error     string `json:"error,omitempty"`
	ErrorCode string `json:"error_code,omitempty"`
}

// sources wraps a body as the one user message the debug surface accepts (§14.1).
func sources(body string) []markdown.Source {
	return []markdown.Source{{Message: 0, Text: body}}
}

// ListBlocks extracts a body's blocks and classifies each on its own. Only extraction can fail
// (*markdown.UnclosedError); no blocks is an empty list.
func ListBlocks(eng *engine.Engine, body string) ([]BlockInfo, error) {
	blocks, err := markdown.Extract(sources(body))
	if err != nil {
		return nil, err
	}
	return classify(eng, blocks), nil
}

func classify(eng *engine.Engine, blocks []markdown.Block) []BlockInfo {
	programs := eng.Config().Programs
	out := make([]BlockInfo, 0, len(blocks))
	for _, b := range blocks {
		bi := BlockInfo{Index: b.Index, Lang: b.Label, Code: b.Code}
		if in, ok := programs.Registry().Lookup(b.Label); ok && b.Label != "" {
			bi.Program = in.Name
		}
		if _, err := programs.ResolveOne(b); err != nil {
			bi.Error = err.Error()
			var re *interp.ResolveError
			if errors.As(err, &re) {
				bi.ErrorCode = re.Code
			}
		} else {
			bi.Allowed = true
		}
		out = append(out, bi)
	}
	return out
}

// BlockRun is the result of running one block alone (§14.2's run-block object).
type BlockRun struct {
	Block       int
	BlocksTotal int
	Lang        string
	Program     string
	Outcome     pipeline.Outcome
	Stdout      []byte
	Stderr      []byte
	ExitCode    *int
	Signal      string
	Duration    time.Duration
	MaxRSS      int64
	OK          bool
	Error       string // "block i/n: …" when !OK
	ErrorCode   string // the §11 code the failure would have on the chat path
	Truncated   bool   // stdout passed --max-output-bytes
}

// Object renders the §14.2 reply object.
func (b *BlockRun) Object() map[string]any {
	m := openai.DebugBlock{Lang: b.Lang, Program: b.Program, Outcome: string(b.Outcome), ExitCode: b.ExitCode,
		Signal: b.Signal, Duration: b.Duration, MaxRSS: b.MaxRSS, Stdout: b.Stdout, Stderr: b.Stderr,
		StdoutTruncated: b.Truncated}.Fields()
	m["block"], m["blocks_total"], m["ok"] = b.Block, b.BlocksTotal, b.OK
	if !b.OK {
		m["error"] = b.Error
		m["error_code"] = b.ErrorCode
	}
	return m
}

// RunBlock runs block index of body alone with stdin and input (nil: "{}"), in the production sandbox,
// limits, slots and timeout. Errors are those before execution (extraction, range, resolution, sandbox,
// slots, a client that went away); an executed block that fails is a BlockRun with OK false.
func RunBlock(ctx context.Context, eng *engine.Engine, body string, index int, stdin, input []byte) (*BlockRun, error) {
	return RunBlockWith(ctx, eng, body, index, stdin, input, nil)
}

// RunBlockWith is RunBlock, deterministic when det is set (block k gets det.ForBlock(k), as in a chat run
// of the whole body, so a block steps to the same bytes it gives there).
func RunBlockWith(ctx context.Context, eng *engine.Engine, body string, index int, stdin, input []byte, det *sandbox.Determinism) (*BlockRun, error) {
	blocks, err := markdown.Extract(sources(body))
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= len(blocks) {
		return nil, &RangeError{Index: index, Have: len(blocks)}
	}
	r, err := eng.Config().Programs.ResolveOne(blocks[index])
	if err != nil {
		return nil, err
	}
	if err := eng.CheckSandbox(); err != nil {
		return nil, err
	}
	return runOne(ctx, eng, r, len(blocks), stdin, input, det)
}

// runOne executes one resolved block as a one-block pipeline. Its stdout is captured under the same cap as
// a pipeline's last block, so an oversized output is the output_limit failure rather than silent loss.
func runOne(ctx context.Context, eng *engine.Engine, r interp.Resolved, total int, stdin, input []byte, det *sandbox.Determinism) (*BlockRun, error) {
	if stdin == nil {
		stdin = []byte{}
	}
	res, _, err := eng.Run(ctx, engine.RunRequest{Resolved: []interp.Resolved{r}, Input: input, Stdin: stdin,
		Deterministic: det.ForBlock(r.Block.Index)})
	if err != nil {
		return nil, err
	}
	if res.Err != nil && res.Err.Code == pipeline.CodeCancelled && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if len(res.Blocks) != 1 {
		return nil, fmt.Errorf("debugger: pipeline reported %d blocks for one", len(res.Blocks))
	}
	b := res.Blocks[0]
	br := &BlockRun{
		Block: r.Block.Index, BlocksTotal: total, Lang: r.Block.Label, Program: r.Interp.Name,
		Outcome: b.Outcome, Stdout: b.Stdout, Stderr: b.Stderr, ExitCode: b.ExitCode, Signal: b.Signal,
		Duration: b.Duration, MaxRSS: b.MaxRSS, OK: res.Err == nil, Truncated: b.StdoutTruncated,
	}
	if br.Stdout == nil {
		br.Stdout = res.Stdout
	}
	if res.Err != nil {
		br.ErrorCode = res.Err.Code
		if res.Err.Code == pipeline.CodeInvalid {
			br.ErrorCode = "internal_error"
		}
		// The pipeline numbered the block 1/1; the author thinks of it as block k/n of the body.
		br.Error = renumber(res.Err.Message, r.Block.Index, total)
	}
	return br, nil
}

func renumber(msg string, index, total int) string {
	const one = "block 1/1: "
	if strings.HasPrefix(msg, one) {
		return "block " + strconv.Itoa(index+1) + "/" + strconv.Itoa(total) + ": " + msg[len(one):]
	}
	return msg
}

// StepRecord is one entry of a session's history.
type StepRecord struct {
	Block      int   `json:"block"`
	OK         bool  `json:"ok"`
	ExitCode   *int  `json:"exit_code"`
	DurationMS int64 `json:"duration_ms"`
}

// Final is the outcome of a finished session: the tool calls the chat endpoint would answer, or the
// bad_output envelope it would return.
type Final struct {
	OK        bool
	ToolCalls []openai.ToolCall
	Err       *openai.Error
}

// Object renders {"ok":true,"tool_calls":[…]} or {"ok":false,"error":{…}} (§14.3).
func (f *Final) Object() map[string]any {
	if !f.OK {
		var env map[string]json.RawMessage
		_ = json.Unmarshal(f.Err.Body(), &env)
		return map[string]any{"ok": false, "error": env["error"]}
	}
	calls := make([]map[string]any, len(f.ToolCalls))
	for i, c := range f.ToolCalls {
		calls[i] = map[string]any{"id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
	}
	return map[string]any{"ok": true, "tool_calls": calls}
}

// StepResult is a step's reply: the block's run plus where its stdin came from and the session state
// after the step.
type StepResult struct {
	Run         *BlockRun
	StdinSource string // "buffer" or "request"
	Buffer      []byte
	Next        int
	Done        bool
	Final       *Final
}

// Object renders the §14.3 step result.
func (s *StepResult) Object() map[string]any {
	m := s.Run.Object()
	m["stdin_source"] = s.StdinSource
	openai.PutBytes(m, "buffer", s.Buffer)
	m["next"] = s.Next
	m["done"] = s.Done
	if s.Final != nil {
		m["final"] = s.Final.Object()
	}
	return m
}

// Session runs a body one block at a time, keeping the pipe buffer between blocks (§14.3). It is safe for
// concurrent use; a second step while one runs fails with ErrStepInProgress rather than queueing, since
// the two would race for the same buffer.
type Session struct {
	ID string

	eng       *engine.Engine
	resolved  []interp.Resolved
	blocks    []BlockInfo
	input     []byte
	det       *sandbox.Determinism // nil: not deterministic (SetDeterminism)
	maxBuffer int64
	ctx       context.Context // cancelled when the session is deleted or expires
	cancel    context.CancelFunc

	mu       sync.Mutex
	busy     bool
	next     int
	done     bool
	buffer   []byte
	steps    []StepRecord
	final    *Final
	lastUsed time.Time
}

// NewSession validates body like the chat path (extraction and resolution of every block, the sandbox
// self-check) and returns a session positioned before the first block. input is the bag (nil: "{}").
func NewSession(eng *engine.Engine, body string, input []byte) (*Session, error) {
	resolved, err := eng.Plan(sources(body))
	if err != nil {
		return nil, err
	}
	blocks := make([]markdown.Block, len(resolved))
	for i, r := range resolved {
		blocks[i] = r.Block
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	max := eng.Config().Pipeline.MaxOutputBytes
	if max <= 0 {
		max = pipeline.DefaultMaxOutputBytes
	}
	return &Session{
		ID: hex.EncodeToString(raw[:]), eng: eng, resolved: resolved, blocks: classify(eng, blocks),
		input: input, maxBuffer: max, ctx: ctx, cancel: cancel, lastUsed: time.Now(),
	}, nil
}

// SetDeterminism makes every later step deterministic with d (nil: off); call it before the first step.
func (s *Session) SetDeterminism(d *sandbox.Determinism) {
	s.mu.Lock()
	s.det = d
	s.mu.Unlock()
}

// Close cancels a running step (its processes are killed) and makes the session unusable.
func (s *Session) Close() { s.cancel() }

// claim marks the session busy or reports why it cannot be.
func (s *Session) claim() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return ErrSessionNotFound
	}
	if s.busy {
		return ErrStepInProgress
	}
	s.busy = true
	return nil
}

func (s *Session) release() {
	s.mu.Lock()
	s.busy = false
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

// Step runs block next. stdin nil means "feed the buffer"; a non-nil stdin (even empty) is fed instead.
// A successful step stores the block's stdout as the buffer and advances; a failed one changes neither,
// so the author can edit the buffer and step again.
func (s *Session) Step(ctx context.Context, stdin []byte) (*StepResult, error) {
	if err := s.claim(); err != nil {
		return nil, err
	}
	defer s.release()
	s.mu.Lock()
	done, next, buffer := s.done, s.next, s.buffer
	s.mu.Unlock()
	if done {
		return nil, ErrSessionDone
	}
	source := "request"
	if stdin == nil {
		source, stdin = "buffer", buffer
	}
	// Deleting or expiring the session kills the step, as a client going away does.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	run, err := runOne(ctx, s.eng, s.resolved[next], len(s.resolved), stdin, s.input, s.det)
	if s.ctx.Err() != nil {
		// Deleted or expired while the block ran: the run was killed and nothing is recorded.
		return nil, ErrSessionNotFound
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, StepRecord{Block: next, OK: run.OK, ExitCode: run.ExitCode,
		DurationMS: run.Duration.Milliseconds()})
	res := &StepResult{Run: run, StdinSource: source}
	if run.OK {
		s.buffer = run.Stdout
		s.next++
		if s.next == len(s.resolved) {
			s.done = true
			s.final = finalOf(run.Stdout)
			res.Final = s.final
		}
	}
	res.Buffer, res.Next, res.Done = s.buffer, s.next, s.done
	return res, nil
}

// finalOf parses the last block's stdout as the chat endpoint does (no tool-list check: the debugger's
// caller offers no tools).
func finalOf(stdout []byte) *Final {
	calls, err := engine.Answer(stdout, nil)
	if err != nil {
		return &Final{Err: apierror.Map(err, 5*time.Second)}
	}
	return &Final{OK: true, ToolCalls: calls}
}

// SetBuffer replaces the buffer the next step reads.
func (s *Session) SetBuffer(b []byte) error {
	if int64(len(b)) > s.maxBuffer {
		return &BufferSizeError{Size: int64(len(b)), Limit: s.maxBuffer}
	}
	if err := s.claim(); err != nil {
		return err
	}
	defer s.release()
	s.mu.Lock()
	s.buffer = append([]byte{}, b...)
	s.mu.Unlock()
	return nil
}

// Reset returns to the first block with an empty buffer and no history.
func (s *Session) Reset() error {
	if err := s.claim(); err != nil {
		return err
	}
	defer s.release()
	s.mu.Lock()
	s.next, s.done, s.buffer, s.steps, s.final = 0, false, nil, nil, nil
	s.mu.Unlock()
	return nil
}

// State is a snapshot of a session.
type State struct {
	ID        string
	Blocks    []BlockInfo
	Next      int
	Done      bool
	Buffer    []byte
	Steps     []StepRecord
	Final     *Final
	ExpiresAt time.Time
}

// Object renders the §14.3 session state.
func (st State) Object() map[string]any {
	steps := st.Steps
	if steps == nil {
		steps = []StepRecord{}
	}
	m := map[string]any{"id": st.ID, "blocks": st.Blocks, "next": st.Next, "done": st.Done, "steps": steps}
	openai.PutBytes(m, "buffer", st.Buffer)
	if !st.ExpiresAt.IsZero() {
		m["expires_at"] = st.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if st.Final != nil {
		m["final"] = st.Final.Object()
	}
	return m
}

// State returns a snapshot; ttl (0: none) computes expires_at from the last use.
func (s *Session) State(ttl time.Duration) State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{ID: s.ID, Blocks: s.blocks, Next: s.next, Done: s.done, Buffer: s.buffer,
		Steps: append([]StepRecord(nil), s.steps...), Final: s.final}
	if ttl > 0 {
		st.ExpiresAt = s.lastUsed.Add(ttl)
	}
	return st
}

// touch records a request; idle expiry counts from the last one.
func (s *Session) touch(now time.Time) {
	s.mu.Lock()
	s.lastUsed = now
	s.mu.Unlock()
}

// expired reports whether the session was idle longer than ttl; a running step is never idle.
func (s *Session) expired(now time.Time, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.busy && now.Sub(s.lastUsed) > ttl
}

// store holds the sessions of one debugger: capped, expiring lazily on every access so that no janitor
// goroutine outlives the listener.
type store struct {
	mu  sync.Mutex
	m   map[string]*Session
	max int
	ttl time.Duration
}

func (st *store) purgeLocked(now time.Time) {
	for id, s := range st.m {
		if s.expired(now, st.ttl) {
			s.Close()
			delete(st.m, id)
		}
	}
}

func (st *store) add(s *Session) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	st.purgeLocked(now)
	if len(st.m) >= st.max {
		return fmt.Errorf("%w: %d sessions are open (--debug-max-sessions); delete one or wait for one to expire",
			ErrTooManySessions, len(st.m))
	}
	s.touch(now)
	st.m[s.ID] = s
	return nil
}

func (st *store) get(id string) (*Session, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := time.Now()
	st.purgeLocked(now)
	s, ok := st.m[id]
	if !ok {
		return nil, ErrSessionNotFound
	}
	s.touch(now)
	return s, nil
}

func (st *store) remove(id string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.purgeLocked(time.Now())
	s, ok := st.m[id]
	if !ok {
		return ErrSessionNotFound
	}
	s.Close()
	delete(st.m, id)
	return nil
}

func (st *store) closeAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for id, s := range st.m {
		s.Close()
		delete(st.m, id)
	}
}
