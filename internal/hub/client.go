package hub

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/wire"
)

// ChatRuntimeLabel is the capability label of workers that serve chat (§13.2).
const ChatRuntimeLabel = "codellm.openai.chat.v1"

// clientRefusals are how one client route answers a wrong method, a missing or unknown key (with why)
// and a full client connection cap, each in the route's own envelope.
type clientRefusals struct {
	method, limit func(w http.ResponseWriter)
	auth          func(w http.ResponseWriter, msg string)
}

// connLimitMessage explains a 503 connection_limit.
const connLimitMessage = "The hub has as many client connections open as it allows; retry later"

// Each client route's refusals, as they have always been answered.
var (
	execRefusals = clientRefusals{
		method: func(w http.ResponseWriter) {
			w.Header().Set("Allow", http.MethodPost)
			writeExecError(w, &clientError{status: http.StatusMethodNotAllowed, code: "method_not_allowed"})
		},
		auth: func(w http.ResponseWriter, msg string) {
			writeExecError(w, &clientError{status: http.StatusUnauthorized, code: "unauthorized", message: msg})
		},
		limit: func(w http.ResponseWriter) {
			writeExecError(w, &clientError{status: http.StatusServiceUnavailable, code: "connection_limit", message: connLimitMessage, retryAfter: 1})
		},
	}
	chatRefusals = clientRefusals{
		method: func(w http.ResponseWriter) {
			writeChatError(w, &clientError{status: http.StatusMethodNotAllowed, code: "method_not_allowed", message: "Use POST"})
		},
		auth: func(w http.ResponseWriter, msg string) {
			writeChatError(w, &clientError{status: http.StatusUnauthorized, code: "invalid_api_key", message: msg})
		},
		limit: func(w http.ResponseWriter) {
			writeChatError(w, &clientError{status: http.StatusServiceUnavailable, code: "connection_limit", message: connLimitMessage, retryAfter: 1})
		},
	}
	toolRefusals = clientRefusals{
		method: func(w http.ResponseWriter) {
			w.Header().Set("Allow", http.MethodPost)
			writeToolError(w, http.StatusMethodNotAllowed, "Use POST", "", 0)
		},
		auth: func(w http.ResponseWriter, msg string) {
			writeToolError(w, http.StatusUnauthorized, msg, "", 0)
		},
		limit: func(w http.ResponseWriter) {
			writeToolError(w, http.StatusServiceUnavailable, connLimitMessage, "", 1)
		},
	}
)

// clientRoute is the client routes' authentication middleware (§13): the route's one method first, then
// a client API key, then a place among the client connections; serve gets the caller the key identifies.
func (h *Hub) clientRoute(method string, refuse clientRefusals, serve func(w http.ResponseWriter, r *http.Request, key *ClientKey)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			refuse.method(w)
			return
		}
		key, why := h.authenticate(r)
		if key == nil {
			refuse.auth(w, why)
			return
		}
		if !h.conns.admit(r, connClient) {
			w.Header().Set("Connection", "close")
			refuse.limit(w)
			return
		}
		serve(w, r, key)
	}
}

// clientKey authenticates a client request (authenticate), nil when it is refused.
func (h *Hub) clientKey(r *http.Request) *ClientKey {
	k, _ := h.authenticate(r)
	return k
}

// authenticate identifies a client request (§13): a static key in X-API-Key or Bearer, else a bearer
// that is a signed per-user token (clientjwt.go). A refusal comes with why, for the 401.
func (h *Hub) authenticate(r *http.Request) (*ClientKey, string) {
	const invalid = "Missing or invalid API key"
	tok := r.Header.Get("X-API-Key")
	bearer := tok == ""
	if bearer {
		tok, _ = httpserve.Bearer(r)
	}
	if tok == "" {
		return nil, invalid
	}
	for i := range h.cfg.ClientKeys {
		if httpserve.Equal(tok, h.cfg.ClientKeys[i].Key) {
			k := h.cfg.ClientKeys[i]
			return &k, ""
		}
	}
	if !bearer {
		return nil, invalid
	}
	if k, why := h.signedBearer(tok); k != nil || why != "" {
		return k, why
	}
	return nil, invalid
}

func writeExecError(w http.ResponseWriter, e *clientError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	o := &bridge.Object{}
	o.Set("error", e.code)
	if e.code == "rate_limited" {
		o.Set("retry_after_seconds", float64(e.retryAfter))
	}
	if e.message != "" {
		o.Set("message", e.message)
	}
	b, _ := bridge.Canonical(o)
	writeJSON(w, e.status, b)
}

// execLanguages maps LibreChat's lang codes to runner languages and an entry
// file name (§13.1).
var execLanguages = map[string][2]string{
	"py": {"python", "main.py"}, "js": {"javascript", "main.js"}, "ts": {"typescript", "main.ts"},
	"c": {"c", "main.c"}, "cpp": {"c++", "main.cpp"}, "java": {"java", "Main.java"}, "php": {"php", "main.php"},
	"rs": {"rust", "main.rs"}, "go": {"go", "main.go"}, "d": {"d", "main.d"}, "f90": {"fortran", "main.f90"},
	"r": {"r", "main.r"}, "bash": {"bash", "main.sh"},
}

type execRequest struct {
	Lang      string            `json:"lang"`
	Code      *string           `json:"code"`
	Args      []string          `json:"args"`
	SessionID string            `json:"session_id"`
	Files     []json.RawMessage `json:"files"`
	UserID    string            `json:"user_id"`
	// Timeout caps the run in milliseconds (upstream's body field): a positive number, rounded up, at
	// most the request's own budget. Raw, so that a wrong type gets its own message.
	Timeout json.RawMessage `json:"timeout"`
	// Metadata carries codellm's deterministic-mode fields (deterministic, seed, now), forwarded to the
	// worker's runner; LibreChat sends none.
	Metadata map[string]json.RawMessage `json:"metadata"`
}

// newSessionID mints 21 chars of [A-Za-z0-9_-].
func newSessionID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	b := make([]byte, 21)
	if _, err := rand.Read(b); err != nil {
		panic("hub: crypto/rand failed: " + err.Error())
	}
	for i := range b {
		b[i] = alphabet[b[i]&63]
	}
	return string(b)
}

// handleExec is POST /v1/exec (§13.1).
func (h *Hub) handleExec(w http.ResponseWriter, r *http.Request, key *ClientKey) {
	raw, err := readBody(r, h.cfg.MaxBody)
	if err != nil {
		writeExecError(w, bodyError(err))
		return
	}
	var req execRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		writeExecError(w, &clientError{status: http.StatusBadRequest, code: "invalid_request", message: "Body must be a JSON object {lang, code, args?, session_id?, files?}"})
		return
	}
	lang, ok := execLanguages[req.Lang]
	if !ok || req.Code == nil {
		writeExecError(w, &clientError{status: http.StatusBadRequest, code: "invalid_request", message: "lang must be one of py js ts c cpp java php rs go d f90 r bash, and code a string"})
		return
	}
	meta, ce := execMetadata(req.Metadata)
	if ce == nil {
		meta, ce = execNetworkAllow(meta, req.Metadata)
	}
	if ce != nil {
		writeExecError(w, ce)
		return
	}
	runCap, ce := execTimeout(req.Timeout)
	if ce != nil {
		writeExecError(w, ce)
		return
	}
	deadline, err := h.deadline(r, h.cfg.ExecTimeout)
	if err != nil {
		writeExecError(w, &clientError{status: http.StatusBadRequest, code: "invalid_request", message: err.Error()})
		return
	}
	pin, ce := h.pinnedWorker(r, key)
	if ce != nil {
		writeExecError(w, ce)
		return
	}
	d := &dispatchReq{caller: key, kind: bridge.KindSandbox, deadline: deadline, pinned: pin}
	if ce := h.execSession(r.Context(), d, req.SessionID); ce != nil {
		writeExecError(w, ce)
		return
	}
	inputs, readOnly, ce := h.execInputs(r.Context(), key, req.Files, lang[1])
	if ce != nil {
		writeExecError(w, ce)
		return
	}
	body := execBody(lang, *req.Code, req.Args, inputs, d.sessionID, deadline, runCap)
	if meta != nil {
		body.Set("metadata", meta)
	}
	owner := &bridge.Object{} // the worker's runner caps sessions per tenant
	owner.Set(bridge.HeaderSessionOwner, bridge.SessionOwner(key.TenantID))
	d.request = assignmentRequest(body, owner)
	out, err := h.dispatch(r.Context(), d)
	if err != nil {
		writeExecError(w, h.fail(err))
		return
	}
	if h.cfg.Files != nil && (req.SessionID != "" || len(req.Files) > 0) {
		// Other hub replicas learn the session (and its owner) from the shared file store.
		if err := h.cfg.Files.Touch(context.WithoutCancel(r.Context()), key.TenantID, d.sessionID); err != nil {
			h.cfg.Logger.Warn("file store: touch session failed", "session", d.sessionID, "err", err)
		}
	}
	if out.status != bridge.StatusFulfilled {
		writeExecError(w, rejectionError(out))
		return
	}
	if v := deterministicHeader(out.result); v != "" {
		w.Header().Set(wire.DeterminismHeader, v)
	}
	writeValue(w, http.StatusOK, h.execReply(r.Context(), key, d.sessionID, out.result, readOnly))
}

// execSession resolves the request's session_id (the store's session record, which every replica shares,
// then the shared file store, which knows sessions created by an upload) or mints a new one.
func (h *Hub) execSession(ctx context.Context, d *dispatchReq, sid string) *clientError {
	if sid == "" {
		d.sessionID = newSessionID()
		d.session = &store.Session{ID: d.sessionID, TenantID: d.caller.TenantID}
		return nil
	}
	d.sessionID = sid
	s, err := h.store.Session(ctx, sid)
	if err != nil {
		return h.fail(err)
	}
	if s != nil {
		if s.TenantID != d.caller.TenantID {
			return &clientError{status: http.StatusNotFound, code: "session_not_found"}
		}
		if time.Since(s.LastUsed) > store.SessionRefresh || s.IncarnationID == "" {
			// Due for a refresh, or reset: this run records it again (with the incarnation that runs it).
			d.session = &store.Session{ID: sid, TenantID: s.TenantID}
		}
		d.affinity, d.stateful = s.WorkerID, s.Stateful
		if s.Stateful {
			return h.sessionWorker(ctx, s)
		}
		return nil
	}
	if h.cfg.Files != nil {
		// A session an upload created: from this run on, a session of the store too.
		if owner, err := h.cfg.Files.Owner(ctx, sid); err == nil && owner == d.caller.TenantID {
			d.session = &store.Session{ID: sid, TenantID: owner}
			return nil
		}
	}
	return &clientError{status: http.StatusNotFound, code: "session_not_found"}
}

// sessionWorker refuses a stateful session whose files are gone: another incarnation of its worker
// registered since it last ran (the session's runner went with the previous process), so continuing it
// would silently run in an empty workspace. A worker that is merely offline may come back: dispatch
// answers 503 worker_unavailable.
func (h *Hub) sessionWorker(ctx context.Context, s *store.Session) *clientError {
	st, err := h.store.Worker(ctx, s.WorkerID)
	if err != nil {
		return h.fail(err)
	}
	if st.Registration != nil && s.IncarnationID != "" && st.Registration.IncarnationID != s.IncarnationID {
		return &clientError{status: http.StatusConflict, code: "session_lost", message: "The session's worker " + s.WorkerID +
			" restarted since the session last ran, and its files were held by the previous worker process; start a new session (omit session_id)"}
	}
	return nil
}

// execTimeout reads /v1/exec's body timeout as upstream does: absent or null is none (0), a positive
// number of milliseconds is rounded up, anything else is 400 with upstream's message.
func execTimeout(raw json.RawMessage) (time.Duration, *clientError) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var ms float64
	if err := json.Unmarshal(raw, &ms); err != nil || ms <= 0 || ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0, &clientError{status: http.StatusBadRequest, code: "invalid_request", message: "timeout must be a positive number of milliseconds"}
	}
	return time.Duration(math.Ceil(ms)) * time.Millisecond, nil
}

// execBody builds the runner request of §13.1. run_timeout leaves the hub time to collect the result
// before its own deadline, so a program that never ends comes back with its partial output and a
// timeout status instead of expiring the assignment. runCap (0: none), the body's timeout, lowers the
// run's limit further; the deadline stays the request's, as upstream keeps JOB_TIMEOUT for its wait.
func execBody(lang [2]string, code string, args []string, inputs []any, sid string, deadline time.Time, runCap time.Duration) *bridge.Object {
	body := &bridge.Object{}
	body.Set("language", lang[0])
	body.Set("version", "*")
	file := &bridge.Object{}
	file.Set("name", lang[1])
	file.Set("content", code)
	body.Set("files", append([]any{file}, inputs...))
	a := []any{}
	for _, s := range args {
		a = append(a, s)
	}
	body.Set("args", a)
	body.Set("session_id", sid)
	budget := runTimeout(time.Until(deadline))
	if compiledLangs[lang[0]] {
		// Compile and run each get their own limit (Piston's compile_timeout); together they stay
		// within the budget.
		compile := budget / 3
		body.Set("compile_timeout", float64(compile.Milliseconds()))
		budget -= compile
	}
	if runCap > 0 {
		budget = min(budget, runCap)
	}
	body.Set("run_timeout", float64(budget.Milliseconds()))
	return body
}

// compiledLangs are the runner languages of §13.1 with a compile stage.
var compiledLangs = map[string]bool{"typescript": true, "c": true, "c++": true, "rust": true, "go": true, "d": true, "fortran": true}

// runTimeout is the run budget within a remaining deadline: a margin of a tenth (at least 1 s, at most
// 5 s) is kept for delivery, compilation overheads and the settlement.
func runTimeout(remaining time.Duration) time.Duration {
	margin := min(max(remaining/10, time.Second), 5*time.Second)
	return max(remaining-margin, 100*time.Millisecond)
}

// execReply maps a runner result to LibreChat's {session_id, stdout, stderr, files?}: compile output
// first, then run output; a run that codellm stopped (timeout, output cap, signal) says why on stderr.
// readOnly names the run's read-only inputs, which never come back as generated files.
func (h *Hub) execReply(ctx context.Context, key *ClientKey, sid string, result *bridge.Object, readOnly []string) *bridge.Object {
	stdout, stderr := "", ""
	for _, part := range []string{"compile", "run"} {
		v, _ := result.Get(part)
		o, ok := v.(*bridge.Object)
		if !ok {
			continue
		}
		so, _ := o.Get("stdout")
		se, _ := o.Get("stderr")
		s1, _ := so.(string)
		s2, _ := se.(string)
		stdout += s1
		stderr += s2
		st, _ := o.Get("status")
		msg, _ := o.Get("message")
		if m, ok := msg.(string); ok && m != "" && st != "RE" && st != nil {
			stderr = appendLine(stderr, part+": "+m)
		}
	}
	refs, notes := h.keepOutputs(ctx, key, sid, result, readOnly)
	for _, n := range notes {
		stderr = appendLine(stderr, n)
	}
	resp := &bridge.Object{}
	resp.Set("session_id", sid)
	resp.Set("stdout", stdout)
	resp.Set("stderr", stderr)
	if len(refs) > 0 {
		resp.Set("files", refs)
	}
	return resp
}

func appendLine(s, line string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s + line + "\n"
}

// rejectionError maps a rejected exec: a request the runner refused as invalid (unknown language or
// version, a bad file) is the caller's 400 — retrying cannot help — and anything else a 502.
// runnerTooManySessions is the runner's error code for a session table (or a tenant's share of it) with
// no room (runner.CodeTooManySessions); the hub answers it 429, as the runner does.
const runnerTooManySessions = "too_many_sessions"

func rejectionError(out *outcome) *clientError {
	if strings.HasPrefix(out.errMsg, runnerDeterministicUnavailable+": ") {
		return &clientError{status: http.StatusNotImplemented, code: runnerDeterministicUnavailable, message: strings.TrimPrefix(out.errMsg, runnerDeterministicUnavailable+": ")}
	}
	if strings.HasPrefix(out.errMsg, runnerTooManySessions+": ") {
		return &clientError{status: http.StatusTooManyRequests, code: runnerTooManySessions, message: strings.TrimPrefix(out.errMsg, runnerTooManySessions+": "), retryAfter: 5}
	}
	if strings.Contains(out.errMsg, "runtime is unknown") || strings.HasPrefix(out.errMsg, "files[") || networkAllowRefused(out.errMsg) {
		return &clientError{status: http.StatusBadRequest, code: "invalid_request", message: out.errMsg}
	}
	return &clientError{status: http.StatusBadGateway, code: "execution_failed", message: out.errMsg}
}

// bodyError distinguishes an oversized client body from an unreadable one.
func bodyError(err error) *clientError {
	if errors.Is(err, bridge.ErrBodyTooLarge) {
		return &clientError{status: http.StatusRequestEntityTooLarge, code: "request_too_large", message: "Request body is too large"}
	}
	return &clientError{status: http.StatusBadRequest, code: "invalid_request", message: "Unreadable request body"}
}

// assignmentRequest builds a sandbox assignment's {body, headers}.
func assignmentRequest(body, headers *bridge.Object) []byte {
	o := &bridge.Object{}
	o.Set("body", body)
	o.Set("headers", headers)
	b, _ := bridge.Canonical(o)
	return b
}

func writeChatError(w http.ResponseWriter, e *clientError) {
	oe := openai.NewError(e.status, e.code, "%s", e.message)
	if e.retryAfter > 0 {
		oe = oe.WithHeader("Retry-After", strconv.Itoa(e.retryAfter))
	}
	openai.WriteError(w, oe)
}

// The chat body's two decoders: bridge's ordered tree (for the assignment) and the byte decoder (for a
// refusal's exact message). Variables only so that a test can count the parses.
var (
	parseChatTree   = bridge.ParseObject
	decodeChatBytes = openai.DecodeChatRequest
)

// decodeChat parses a chat body once, into bridge's ordered tree, and reads the typed request from that
// tree (issue 15 item 3). A body the tree converter does not accept (every refusal, and a numeric
// metadata.seed/now) is decoded again from the bytes, so each refusal keeps DecodeChatRequest's status and
// message; a body only encoding/json accepts (invalid UTF-8, nesting past bridge's limit) is refused as
// before: 400 invalid_json "Body must be a JSON object".
func decodeChat(raw []byte) (*openai.ChatRequest, *bridge.Object, *openai.Error) {
	body, err := parseChatTree(raw)
	if err == nil {
		if req, ok := openai.ChatRequestFromTree(body); ok {
			return req, body, nil
		}
	}
	req, oerr := decodeChatBytes(raw)
	if oerr != nil {
		return nil, nil, oerr
	}
	if err != nil {
		return nil, nil, openai.NewError(http.StatusBadRequest, "invalid_json", "%s", "Body must be a JSON object")
	}
	return req, body, nil
}

// handleChat is POST /v1/chat/completions, executed on a worker (§13.2).
func (h *Hub) handleChat(w http.ResponseWriter, r *http.Request, key *ClientKey) {
	raw, err := readBody(r, h.cfg.MaxBody)
	if err != nil {
		writeChatError(w, bodyError(err))
		return
	}
	req, body, oerr := decodeChat(raw)
	if oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	// The assignment carries the client's body with members in the client's order; only stream is
	// forced off (the worker answers one chat.completion and the hub streams it, below).
	body.Set("stream", false)
	if req.NetworkAllow != nil {
		if _, err := egress.Parse(*req.NetworkAllow); err != nil {
			writeChatError(w, &clientError{status: http.StatusBadRequest, code: wire.CodeInvalidMetadata, message: wire.RefusedNetworkAllow(err).Error()})
			return
		}
	}
	deadline, err := h.deadline(r, h.cfg.ChatTimeout)
	if err != nil {
		writeChatError(w, &clientError{status: http.StatusBadRequest, code: "invalid_request", message: err.Error()})
		return
	}
	pin, ce := h.pinnedWorker(r, key)
	if ce != nil {
		writeChatError(w, ce)
		return
	}
	headers := &bridge.Object{}
	headers.Set(wire.OperationHeader, wire.OperationChat)
	d := &dispatchReq{
		caller: key, kind: bridge.KindSandbox, request: assignmentRequest(body, headers), runtimeLabel: ChatRuntimeLabel,
		model: req.Model, deadline: deadline, pinned: pin,
	}
	out, err := h.dispatch(r.Context(), d)
	if err != nil {
		writeChatError(w, h.fail(err))
		return
	}
	if out.status != bridge.StatusFulfilled {
		if networkAllowRefused(out.errMsg) {
			writeChatError(w, &clientError{status: http.StatusBadRequest, code: wire.CodeInvalidMetadata, message: out.errMsg})
			return
		}
		writeChatError(w, &clientError{status: http.StatusBadGateway, code: "execution_failed", message: out.errMsg})
		return
	}
	if !req.Stream {
		b, _ := bridge.Canonical(out.result)
		writeJSON(w, http.StatusOK, b)
		return
	}
	writeSSE(w, out.result, req.IncludeUsage)
}

// writeSSE streams a worker's settled chat.completion with the service's encoder (openai.Reply.Stream,
// §10.3): the same role chunk, per-call deltas with argument fragments (or the guard's text), finish
// chunk, usage chunk when the client asked for it, and [DONE]. A result that is not a chat.completion is the worker's fault: 502.
func writeSSE(w http.ResponseWriter, result *bridge.Object, includeUsage bool) {
	b, _ := bridge.Canonical(result)
	c, err := openai.ParseCompletion(b)
	if err != nil {
		writeChatError(w, &clientError{status: http.StatusBadGateway, code: "execution_failed", message: "The worker's reply is not a chat.completion"})
		return
	}
	_ = c.WriteStream(w, includeUsage) // tool calls, or the re-execution guard's final text
}
