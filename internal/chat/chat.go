// Package chat is codellm's chat processing core: it turns a chat completion (or a Responses request mapped
// onto one, for internal/responses) into its answer — read and decode the body, the tool-choice rule, the
// re-execution guard, the finish tool, the bag and its sealed secrets, plan, run through internal/engine,
// redact, parse the tool calls (Answer) — and encodes a chat completion, its stream or the OpenAI error
// envelope (Converse). The HTTP server and the worker's in-process chat
// operation both call it, so the two can never disagree about a request. Listener concerns (the Host and
// Origin rules, authentication, idempotency, request logging, draining) stay in internal/server.
package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/codellm/codellm/internal/apierror"
	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/metrics"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/seal"
)

// Config is what the chat core needs besides the engine.
type Config struct {
	Engine         *engine.Engine
	Metrics        *metrics.Service // nil: a private one nobody scrapes
	Logger         *slog.Logger     // nil: discard
	DebugExtension bool             // honour x_codellm_debug (§13)
	MaxBodyBytes   int64            // default 10 MiB
	RetryAfter     time.Duration    // Retry-After on 429 (default 5 s)
	// Fallback names the mechanisms a besteffort sandbox runs every block without ("a,b"; "" when none
	// or another mode): trip2g's codellm_sandbox_fallbacks_total{reason} counts each block run so.
	Fallback string
}

// Service answers chat requests. It is safe for concurrent use.
type Service struct{ cfg Config }

// New fills in the defaults.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewService(func() float64 { return 0 })
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 5 * time.Second
	}
	return &Service{cfg: cfg}
}

// Facts are what a request tells its log line (the server's request log embeds them).
type Facts struct {
	ID       string // the completion id; Converse sets it when empty
	Code     string // the error code answered ("" on success)
	Model    string
	Blocks   int
	Programs []string
	Exits    []string
	Queue    time.Duration
	Run      time.Duration
}

// Decoder maps a chat-completions request body onto a ChatRequest (openai.DecodeChatRequest, or the tree
// decoder of Handler).
type Decoder func([]byte) (*openai.ChatRequest, *openai.Error)

// Handler serves chat completions with nothing around them: the worker's in-process chat operation, whose
// exactly-once is the hub's settlement, not the server's idempotency guard. When the caller has already
// parsed the body (openai.WithChatTree on the request context), the request is read from that tree and
// the bytes are not parsed again (issue 15 item 3); refusals still come from the bytes, word for word.
func (s *Service) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tree := openai.ChatTreeFrom(r.Context())
		s.Converse(w, r, &Facts{}, func(body []byte) (*openai.ChatRequest, *openai.Error) {
			return openai.DecodeChatRequestTree(body, tree)
		})
	})
}

// Converse implements §2.1's processing order for one request and writes the answer to w.
func (s *Service) Converse(w http.ResponseWriter, r *http.Request, f *Facts, decode Decoder) {
	if f.ID == "" {
		f.ID = openai.NewID()
	}
	body, oe := s.ReadBody(w, r)
	if oe != nil {
		s.Fail(w, f, oe)
		return
	}
	req, oe := decode(body)
	if oe != nil {
		s.Fail(w, f, oe)
		return
	}
	out := s.Answer(r.Context(), f, req)
	for k, vs := range out.Header {
		w.Header()[k] = vs
	}
	if out.Err != nil {
		s.failExtra(w, f, out.Err, out.Reply.Extra)
		return
	}
	s.reply(w, f, req, out.Reply)
}

// ReadBody reads a request body within the body limit: 413 request_too_large beyond it.
func (s *Service) ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, *openai.Error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, openai.NewError(http.StatusRequestEntityTooLarge, "request_too_large",
				"request body exceeds %d bytes", s.cfg.MaxBodyBytes)
		}
		return nil, openai.NewError(http.StatusBadRequest, "invalid_json", "cannot read request body: %v", err)
	}
	return body, nil
}

// Outcome is the answer to one request before it is encoded: Reply (its calls or the guard's text, and
// the x_codellm_debug object in Reply.Extra), or Err with Reply.Extra still carrying the debug object.
// Header holds the headers the answer adds (the determinism header). Err.Status 499 means the run was
// cancelled and nobody is there to answer.
type Outcome struct {
	Reply  *openai.Reply
	Err    *openai.Error
	Header http.Header
}

// Answer is the core of §2.1 on a decoded request: the tool-choice rule, the re-execution guard, the
// finish tool, then the run. It writes nothing; Facts are filled in as the request log wants them.
func (s *Service) Answer(ctx context.Context, f *Facts, req *openai.ChatRequest) *Outcome {
	if f.ID == "" {
		f.ID = openai.NewID()
	}
	f.Model = req.Model
	if f.Model == "" {
		f.Model = "codellm"
	}
	out := &Outcome{Reply: &openai.Reply{ID: f.ID, Created: time.Now().Unix(), Model: f.Model}, Header: http.Header{}}
	fail := func(e *openai.Error) *Outcome {
		f.Code, out.Err = e.Code, e
		s.countExecError(e.Status, e.Code) // once per answer, however it is written (envelope or response.failed)
		return out
	}
	guarded := req.Guarded()
	if e := req.ToolChoice.Check(guarded); e != nil {
		return fail(e)
	}
	if guarded {
		s.cfg.Metrics.ReexecutionGuard.Inc()
		s.cfg.Logger.Warn("re-execution guard: the conversation was already answered; nothing runs", "id", f.ID)
		if req.ToolChoice.Requires() {
			// The request insists on a tool call: the guard's finish, as a model bound to call a tool sends.
			out.Reply.Calls = []openai.ToolCall{contract.FinishCall(req.GuardAnswer())}
			return out
		}
		// A final assistant message, as a real model answers once its tools ran: every agent loop stops at
		// it (a finish call again would keep them calling until their step cap, or without bound).
		text := req.GuardAnswer()
		out.Reply.Text = &text
		return out
	}
	if err := contract.RequireFinish(req.Tools); err != nil {
		return fail(apierror.Map(err, 0))
	}
	if e := s.run(ctx, f, req, out); e != nil {
		return fail(e)
	}
	return out
}

// run opens the bag, plans and runs the blocks and puts their tool calls into out.
func (s *Service) run(ctx context.Context, f *Facts, req *openai.ChatRequest, out *Outcome) *openai.Error {
	eng := s.cfg.Engine
	bag, oe := req.Bag()
	if oe != nil {
		return oe
	}
	// trip2g's sealed secrets: the bag's declared frontmatter fields open with codellm's own SEAL_KEY
	// into bag.secrets before anything runs; from here on every error and debug byte is redacted.
	bag, secrets, err := seal.Unseal(bag, os.Getenv, seal.ExposedIn(eng.Config().Exposed))
	if err != nil {
		return apierror.Map(err, 0)
	}
	resolved, err := eng.Plan(req.Sources())
	if err != nil {
		return apierror.Map(err, 0)
	}
	f.Blocks = len(resolved)
	for _, rb := range resolved {
		f.Programs = append(f.Programs, rb.Interp.Name)
	}
	s.cfg.Metrics.RunBlocks.Observe(float64(len(resolved)))
	if req.NetworkAllow != nil {
		if err := eng.CheckNetworkAllow(*req.NetworkAllow); err != nil {
			return openai.NewError(http.StatusBadRequest, "invalid_metadata", `field "metadata.network_allow": %v`, err)
		}
	}
	det, err := eng.Determinism(engine.DeterminismChoice(req.Determinism), bag)
	if err != nil {
		return determinismError(err)
	}
	tap := s.cfg.DebugExtension && req.Debug
	res, info, err := eng.Run(ctx, engine.RunRequest{
		Resolved:     resolved,
		Input:        bag,
		Timeout:      eng.EffectiveTimeout(req.TimeoutSeconds),
		Tap:          tap,
		NetworkAllow: req.NetworkAllow,

		Deterministic: det,
	})
	f.Queue = info.QueueWait
	s.cfg.Metrics.QueueWait.Observe(info.QueueWait.Seconds())
	if err != nil {
		return apierror.Map(err, s.cfg.RetryAfter)
	}
	f.Run = info.Duration
	if det != nil {
		out.Header.Set(engine.DeterminismHeader, engine.DeterminismHeaderValue(det))
	}
	RedactResult(res, secrets)
	s.observeRun(res, info, f)
	s.observeTrip2g(res)
	if tap {
		out.Reply.Extra = map[string]any{"x_codellm_debug": DebugObject(res)}
	}
	return s.answer(ctx, req, res, secrets, out)
}

// answer reads a finished run: its error, or the tool calls parsed from the last block's stdout.
func (s *Service) answer(ctx context.Context, req *openai.ChatRequest, res *pipeline.Result, secrets []string, out *Outcome) *openai.Error {
	if res.Err != nil {
		if res.Err.Code == "cancelled" || ctx.Err() != nil {
			return &openai.Error{Status: 499, Code: "cancelled", Message: "the run was cancelled"}
		}
		return apierror.Map(res.Err, 0)
	}
	calls, err := engine.Answer(res.Stdout, req.Tools)
	if err != nil {
		e := apierror.Map(err, 0)
		e.Message = seal.Redact(e.Message, secrets) // bad_output quotes the stdout, which may print the bag
		return e
	}
	s.countChanges(calls)
	out.Reply.Calls = calls
	return nil
}

// Fail records e's code and writes its envelope (nothing for 499: nobody is there to answer).
func (s *Service) Fail(w http.ResponseWriter, f *Facts, e *openai.Error) {
	f.Code = e.Code
	if e.Status == 499 {
		return
	}
	openai.WriteError(w, e)
}

func (s *Service) failExtra(w http.ResponseWriter, f *Facts, e *openai.Error, extra map[string]any) {
	if extra == nil || e.Status == 499 {
		s.Fail(w, f, e)
		return
	}
	f.Code = e.Code
	// The debug object rides beside the envelope (§13): {"error":{…},"x_codellm_debug":{…}}.
	var env map[string]json.RawMessage
	if err := json.Unmarshal(e.Body(), &env); err != nil {
		openai.WriteError(w, e)
		return
	}
	body := map[string]any{"error": env["error"]}
	for k, v := range extra {
		body[k] = v
	}
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	openai.WriteJSON(w, e.Status, body)
}

// reply writes a chat completion (or its stream); tool calls get fresh ids first.
func (s *Service) reply(w http.ResponseWriter, f *Facts, req *openai.ChatRequest, out *openai.Reply) {
	out.Calls = openai.WithCallIDs(out.Calls) // unique per response: @openai/agents refuses a reused call id
	if req.Stream {
		if err := out.WriteStream(w, req.IncludeUsage); err != nil {
			s.cfg.Logger.Debug("stream write failed", "id", f.ID, "err", err)
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(out.Completion())
}

// observeRun records metrics and log facts of a finished run.
func (s *Service) observeRun(res *pipeline.Result, info engine.RunInfo, f *Facts) {
	outcome := "ok"
	if res.Err != nil {
		outcome = res.Err.Code
	}
	m := s.cfg.Metrics
	m.RunDuration.WithLabelValues(outcome).Observe(info.Duration.Seconds())
	for _, b := range res.Blocks {
		switch {
		case b.Signal != "":
			f.Exits = append(f.Exits, b.Signal)
		case b.ExitCode != nil:
			f.Exits = append(f.Exits, fmt.Sprint(*b.ExitCode))
		default:
			f.Exits = append(f.Exits, "-")
		}
		if reason := KillReason(b); reason != "" {
			m.Kills.WithLabelValues(reason).Inc()
		}
		if b.Setup > 0 { // zero: the block never started, so there is no setup time to report
			m.SandboxSetup.Observe(b.Setup.Seconds())
		}
	}
}
