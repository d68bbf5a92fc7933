// Package responses is the Responses API as a resource: POST /v1/responses runs a request through the chat
// core (internal/chat) and answers a Response object or its event stream (a failed run streams
// response.failed); the response is stored (unless "store": false) per credential in a bounded memory
// Store, so that GET /v1/responses/{id} retrieves it, GET …/input_items lists its input items, DELETE
// removes it, "background": true answers at once (queued) and runs detached until POST …/cancel, and a
// follow-up's previous_response_id continues its conversation: the stored history, the earlier input and
// output, is put back before the new input, so that the re-execution guard and the code lookup see it.
// Instructions are not carried over to a follow-up, as in OpenAI's API.
package responses

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/chat"
	"github.com/codellm/codellm/internal/openai"
)

// Config is what the service needs from its server.
type Config struct {
	Chat  *chat.Service
	Store *Store
	// Scope names the caller (its credential): responses are stored and found per scope.
	Scope func(r *http.Request) string
	// Detach returns the context of a background run: not cancelled when its client goes away, cancelled on
	// shutdown. Nil: context.Background.
	Detach func(r *http.Request) (context.Context, context.CancelFunc)
	Logger *slog.Logger
}

// Service serves the Responses routes. It is safe for concurrent use.
type Service struct {
	cfg Config
	wg  sync.WaitGroup // background runs
}

// New returns a service; cfg.Chat and cfg.Store are required.
func New(cfg Config) *Service {
	if cfg.Scope == nil {
		cfg.Scope = func(*http.Request) string { return "" }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg}
}

// Wait blocks until every background run has ended (shutdown cancels them through Detach's context).
func (s *Service) Wait() { s.wg.Wait() }

func notFound(id string) *openai.Error {
	return openai.NewError(http.StatusNotFound, "response_not_found",
		"no stored response %q for this credential: it never existed, was created with \"store\": false, was deleted, or expired from the store", id)
}

// Create serves POST /v1/responses.
func (s *Service) Create(w http.ResponseWriter, r *http.Request, f *chat.Facts) {
	if f.ID == "" {
		f.ID = openai.NewID()
	}
	body, oe := s.cfg.Chat.ReadBody(w, r)
	if oe != nil {
		s.cfg.Chat.Fail(w, f, oe)
		return
	}
	req, oe := openai.DecodeResponsesRequest(body)
	if oe != nil {
		s.cfg.Chat.Fail(w, f, oe)
		return
	}
	scope := s.cfg.Scope(r)
	turn, oe := s.continueFrom(scope, req)
	if oe != nil {
		s.cfg.Chat.Fail(w, f, oe)
		return
	}
	if req.Response.Background {
		s.startBackground(w, r, f, scope, req, turn)
		return
	}
	out := s.cfg.Chat.Answer(r.Context(), f, req)
	for k, vs := range out.Header {
		w.Header()[k] = vs
	}
	s.answer(w, f, scope, req, turn, out)
}

// turn is what a response adds to the conversation besides its output.
type turn struct {
	created int64
	history []openai.Message // the conversation it continues (previous_response_id), then its own input
}

// continueFrom puts the conversation of previous_response_id before the request's own input and checks
// what the request asks of the resource: 400 previous_response_not_found, 400 for a streamed background.
func (s *Service) continueFrom(scope string, req *openai.ChatRequest) (*turn, *openai.Error) {
	var history []openai.Message
	if prev := req.Response.PreviousResponseID; prev != "" {
		rec := s.cfg.Store.Get(scope, prev)
		if rec == nil {
			return nil, openai.NewError(http.StatusBadRequest, "previous_response_not_found",
				"previous_response_id %q names no stored response of this credential (never stored, deleted or expired): send the whole conversation as input instead", prev)
		}
		if rec.State.Status != openai.StatusCompleted {
			return nil, openai.NewError(http.StatusBadRequest, "invalid_request",
				"previous_response_id %q is %s: a follow-up continues a completed response", prev, rec.State.Status)
		}
		history = rec.History
	}
	if req.Response.Background && req.Stream {
		return nil, openai.NewError(http.StatusBadRequest, "invalid_request",
			`"background": true with "stream": true is not supported: create it without stream and poll GET /v1/responses/{id}`)
	}
	all, own := req.WithHistory(history)
	req.Messages = all
	if len(req.Messages) == 0 {
		return nil, openai.NewError(http.StatusBadRequest, "invalid_input", `field "input" is empty and the previous response holds no conversation`)
	}
	return &turn{created: time.Now().Unix(), history: append(slices.Clone(history), own...)}, nil
}

// answer writes a finished foreground response and stores it: completed, or failed on a stream (whose
// client already saw its id). A refusal before anything ran (4xx but 422, 429, 503) is the HTTP error it
// always was; a non-streamed failure is the 422 envelope, and is not stored (its id was never shown).
func (s *Service) answer(w http.ResponseWriter, f *chat.Facts, scope string, req *openai.ChatRequest, t *turn, out *chat.Outcome) {
	id := openai.ResponseID(f.ID)
	st := openai.ResponseState{ID: id, CreatedAt: t.created}
	if out.Err != nil {
		if out.Err.Status != http.StatusUnprocessableEntity || !req.Stream {
			s.cfg.Chat.Fail(w, f, out.Err)
			return
		}
		st.Status, st.Err = openai.StatusFailed, out.Err
		s.store(scope, req, st, nil)
		writeEvents(w, openai.ResponseFailedStream(st, req))
		return
	}
	out.Reply.Calls = openai.WithCallIDs(out.Reply.Calls) // unique per response: @openai/agents refuses a reused id
	st.Status, st.CompletedAt, st.Out = openai.StatusCompleted, time.Now().Unix(), out.Reply
	rec := s.store(scope, req, st, append(t.history, openai.ReplyMessage(out.Reply)))
	if req.Stream {
		writeEvents(w, openai.ResponseStream(st, req))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(rec.Object)
}

// store keeps the response when the request allows it, and returns its record (rendered) either way.
func (s *Service) store(scope string, req *openai.ChatRequest, st openai.ResponseState, history []openai.Message) *Record {
	rec := &Record{ID: st.ID, Req: req, State: st, History: history}
	if req.Response.Store {
		s.cfg.Store.Put(scope, rec) // renders rec.Object
		return rec
	}
	rec.Object = st.Object(req)
	return rec
}

func writeEvents(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err == nil {
		_ = http.NewResponseController(w).Flush()
	}
}

// startBackground stores the response as queued, answers it at once, and runs it detached.
func (s *Service) startBackground(w http.ResponseWriter, r *http.Request, f *chat.Facts, scope string, req *openai.ChatRequest, t *turn) {
	ctx, cancel := context.WithCancel(context.Background())
	if s.cfg.Detach != nil {
		ctx, cancel = s.cfg.Detach(r)
	}
	id := openai.ResponseID(f.ID)
	rec := &Record{ID: id, Req: req, State: openai.ResponseState{ID: id, CreatedAt: t.created, Status: openai.StatusQueued}, cancel: cancel}
	s.cfg.Store.Put(scope, rec)
	facts := chat.Facts{ID: f.ID}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		s.runBackground(ctx, &facts, scope, req, t)
	}()
	w.Header().Set("Content-Type", "application/json")
	w.Write(rec.Object)
}

// runBackground runs a background response and records how it ended (unless it was cancelled meanwhile).
func (s *Service) runBackground(ctx context.Context, f *chat.Facts, scope string, req *openai.ChatRequest, t *turn) {
	id := openai.ResponseID(f.ID)
	if !s.cfg.Store.Update(scope, id, func(r *Record) {
		if r.State.Status == openai.StatusQueued {
			r.State.Status = openai.StatusInProgress
		}
	}) {
		return // deleted (and so cancelled) before it started
	}
	out := s.cfg.Chat.Answer(ctx, f, req)
	if out.Err == nil {
		out.Reply.Calls = openai.WithCallIDs(out.Reply.Calls)
	}
	s.cfg.Store.Update(scope, id, func(r *Record) {
		r.cancel = nil
		switch {
		case r.State.Status == openai.StatusCancelled:
		case out.Err != nil && out.Err.Status == 499:
			r.State.Status = openai.StatusCancelled
		case out.Err != nil:
			r.State.Status, r.State.Err = openai.StatusFailed, out.Err
		default:
			r.State.Status, r.State.CompletedAt, r.State.Out = openai.StatusCompleted, time.Now().Unix(), out.Reply
			r.History = append(t.history, openai.ReplyMessage(out.Reply))
		}
	})
	s.cfg.Logger.Info("background response finished", "id", id, "code", f.Code, "blocks", f.Blocks, "run_ms", f.Run.Milliseconds())
}

// Retrieve serves GET /v1/responses/{id}.
func (s *Service) Retrieve(w http.ResponseWriter, r *http.Request, f *chat.Facts) {
	if r.URL.Query().Get("stream") == "true" {
		s.cfg.Chat.Fail(w, f, openai.NewError(http.StatusBadRequest, "invalid_request",
			"streaming a stored response again is not supported: retrieve it without stream"))
		return
	}
	if rec := s.stored(w, r, f); rec != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Write(rec.Object)
	}
}

// stored is the caller's stored response named by the path, or nil after answering 404.
func (s *Service) stored(w http.ResponseWriter, r *http.Request, f *chat.Facts) *Record {
	rec := s.cfg.Store.Get(s.cfg.Scope(r), r.PathValue("id"))
	if rec == nil {
		s.cfg.Chat.Fail(w, f, notFound(r.PathValue("id")))
	}
	return rec
}

// Delete serves DELETE /v1/responses/{id} (a running background response is cancelled).
func (s *Service) Delete(w http.ResponseWriter, r *http.Request, f *chat.Facts) {
	id := r.PathValue("id")
	if !s.cfg.Store.Delete(s.cfg.Scope(r), id) {
		s.cfg.Chat.Fail(w, f, notFound(id))
		return
	}
	openai.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response.deleted", "deleted": true})
}

// Cancel serves POST /v1/responses/{id}/cancel: a queued or running background response stops and is
// "cancelled"; cancelling it again answers the same; any other response is 400.
func (s *Service) Cancel(w http.ResponseWriter, r *http.Request, f *chat.Facts) {
	scope, id := s.cfg.Scope(r), r.PathValue("id")
	var status string
	found := s.cfg.Store.Update(scope, id, func(rec *Record) {
		status = rec.State.Status
		if !rec.Req.Response.Background || (status != openai.StatusQueued && status != openai.StatusInProgress) {
			return
		}
		rec.State.Status, status = openai.StatusCancelled, openai.StatusCancelled
		if rec.cancel != nil {
			rec.cancel()
		}
	})
	rec := s.cfg.Store.Get(scope, id)
	switch {
	case !found || rec == nil:
		s.cfg.Chat.Fail(w, f, notFound(id))
	case !rec.Req.Response.Background:
		s.cfg.Chat.Fail(w, f, openai.NewError(http.StatusBadRequest, "response_not_cancellable",
			"only a response created with \"background\": true can be cancelled; %s ran in its own request", id))
	case status != openai.StatusCancelled:
		s.cfg.Chat.Fail(w, f, openai.NewError(http.StatusBadRequest, "response_not_cancellable",
			"response %s is already %s; only a queued or in-progress background response can be cancelled", id, status))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Write(rec.Object)
	}
}

// InputItems serves GET /v1/responses/{id}/input_items (order asc|desc, default desc; limit 1–100,
// default 20; after: the id to start after).
func (s *Service) InputItems(w http.ResponseWriter, r *http.Request, f *chat.Facts) {
	q := r.URL.Query()
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if q.Get("limit") == "" {
		limit, err = 20, nil
	}
	if err != nil || limit < 1 || limit > 100 || (order != "asc" && order != "desc") {
		s.cfg.Chat.Fail(w, f, openai.NewError(http.StatusBadRequest, "invalid_request",
			"limit must be an integer from 1 to 100 and order \"asc\" or \"desc\" (got limit %q, order %q)", q.Get("limit"), order))
		return
	}
	if rec := s.stored(w, r, f); rec != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Write(items(rec, order, limit, q.Get("after")))
	}
}
