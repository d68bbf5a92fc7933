package hub

// POST /v1/exec/programmatic and /v1/exec/programmatic/cancel: programmatic tool calling as LibreChat's
// agents call it (danny-avila/agents src/tools/ProgrammaticToolCalling.ts and
// BashProgrammaticToolCalling.ts) and as the Code API serves it in replay mode
// (LibreChat-AI/code-interpreter service/src/routes/programmatic.ts). The first request carries code and
// tools; each run of the code on a worker stops at the first tool call it has no result for, and the
// reply hands that call to the client (status tool_call_required, with a continuation_token); the client
// runs the tool and posts {continuation_token, tool_results}; the hub runs the code again from the start
// with every result so far (ptcprogram.go), until it completes or fails.
//
// The execution's state lives in the hub's store (one record per execution, "ptc:x:<id>"), so a
// continuation may land on any replica. Each reply is recorded with the step it answers: a continuation
// retried after its answer was lost (the same token and results) gets the recorded answer again instead
// of a second run, and two continuations of one step at once are answered 409. Cancellation follows the
// Code API: a request may carry X-LibreChat-Code-Request-ID, and POST …/cancel {request_id} from the same
// caller stops its run on the worker (record "ptc:r:<id>", woken through its topic on every replica).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/hub/store"
)

// Bounds of one programmatic execution.
const (
	ptcMaxTools      = 100     // tools of one request (upstream's MAX_TOOLS_PER_REQUEST)
	ptcMaxCalls      = 200     // tool calls of one execution; the client stops at 20 round trips
	ptcMaxStateBytes = 8 << 20 // one execution's stored state (code, tools, every result)
	ptcStateTTL      = time.Hour
	ptcRunGrace      = 5 * time.Second // beyond the run's timeout, for delivery and settlement
	ptcRequestHeader = "X-LibreChat-Code-Request-ID"
)

var ptcRequestID = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// ptcState is one execution, as stored.
type ptcState struct {
	ExecutionID string                     `json:"executionId"`
	SessionID   string                     `json:"sessionId"` // where generated files are kept
	TenantID    string                     `json:"tenantId"`
	Owner       string                     `json:"owner"` // digest of the caller's key
	Language    string                     `json:"language"`
	Code        string                     `json:"code"`
	Tools       []ptcTool                  `json:"tools"`
	Files       []json.RawMessage          `json:"files,omitempty"`
	TimeoutMs   int64                      `json:"timeoutMs"`
	Pinned      string                     `json:"pinned,omitempty"` // the worker every run goes to ("": any)
	History     map[string]ptcHistoryEntry `json:"history"`
	// Pending is the call the last run stopped at (its input as printed); only its result is accepted.
	Pending   *ptcHistoryEntry `json:"pending,omitempty"`
	PendingID string           `json:"pendingId,omitempty"`
	// Step counts the replies given; a continuation token names the step whose reply issued it.
	Step int `json:"step"`
	// BusyUntil: a continuation of this step is running (until then at most).
	BusyUntil time.Time `json:"busyUntil,omitzero"`
	// Last is the reply of step Step, and Answered the digest of the tool_results that asked for it.
	Last     json.RawMessage `json:"last,omitempty"`
	Answered string          `json:"answered,omitempty"`
	Done     bool            `json:"done,omitempty"`
}

// ptcRequest is the body of POST /v1/exec/programmatic: the first request, or a continuation.
type ptcRequest struct {
	Code              *string           `json:"code"`
	Tools             json.RawMessage   `json:"tools"`
	Files             []json.RawMessage `json:"files"`
	Timeout           json.RawMessage   `json:"timeout"`
	Lang              json.RawMessage   `json:"lang"`
	Language          json.RawMessage   `json:"language"`
	ContinuationToken string            `json:"continuation_token"`
	ToolResults       json.RawMessage   `json:"tool_results"`
}

// ptcResult is one entry of tool_results (agents' PTCToolResult).
type ptcResult struct {
	CallID       string          `json:"call_id"`
	Result       json.RawMessage `json:"result"`
	IsError      bool            `json:"is_error"`
	ErrorMessage string          `json:"error_message"`
}

// ptcCall is one entry of tool_calls (agents' PTCToolCall).
type ptcCall struct {
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ptcReply is every 200 answer of the route, in upstream's member order.
type ptcReply struct {
	Status            string          `json:"status"`
	ContinuationToken string          `json:"continuation_token,omitempty"`
	ToolCalls         []ptcCall       `json:"tool_calls,omitempty"`
	PartialStdout     string          `json:"partial_stdout,omitempty"`
	PartialStderr     string          `json:"partial_stderr,omitempty"`
	Error             string          `json:"error,omitempty"`
	Stdout            *string         `json:"stdout,omitempty"`
	Stderr            *string         `json:"stderr,omitempty"`
	Files             json.RawMessage `json:"files,omitempty"`
	SessionID         string          `json:"session_id,omitempty"`
}

// ptcFail is a refusal in the Code API's envelope of this route: {"error": "<what and how to fix it>"}.
type ptcFail struct {
	status  int
	message string
}

func (e *ptcFail) Error() string { return e.message }

func writePTCError(w http.ResponseWriter, status int, msg string) {
	writeJSONValue(w, status, map[string]string{"error": msg})
}

// writeJSONValue writes v with encoding/json, without HTML escaping (stdout is shown as written).
func writeJSONValue(w http.ResponseWriter, status int, v any) {
	writeJSON(w, status, marshalPlain(v))
}

func marshalPlain(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

var ptcRefusals = clientRefusals{
	method: func(w http.ResponseWriter) {
		w.Header().Set("Allow", http.MethodPost)
		writePTCError(w, http.StatusMethodNotAllowed, "Use POST")
	},
	auth: func(w http.ResponseWriter, msg string) {
		writePTCError(w, http.StatusUnauthorized, msg)
	},
	limit: func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "1")
		writePTCError(w, http.StatusServiceUnavailable, connLimitMessage)
	},
}

// programmaticRoutes adds the two routes to rt (whole serves a handler on its exact path).
func (h *Hub) programmaticRoutes(rt *httpserve.Router, whole func(http.HandlerFunc) func(http.ResponseWriter, *http.Request, string)) {
	// Every request, continuations too, counts against the caller's /v1/exec limit and is refused in its
	// body, as upstream's executionLimiter guards both routes.
	run := h.idempotent(h.clientRoute(http.MethodPost, ptcRefusals, h.rateLimited(h.limits.exec, writeExecError, h.handleProgrammatic)),
		func(w http.ResponseWriter, e *clientError) { writePTCError(w, e.status, e.message) })
	for pattern, serve := range map[string]http.HandlerFunc{
		"/v1/exec/programmatic":        run,
		"/v1/exec/programmatic/cancel": h.clientRoute(http.MethodPost, ptcRefusals, h.handleProgrammaticCancel),
	} {
		rt.Handle(pattern, onRawPath(pattern, whole(serve)))
	}
}

func ptcStateKey(executionID string) string { return "ptc:x:" + executionID }

// ptcOwner identifies the caller an execution or a request ID belongs to: its tenant and its key (for a
// signed token, the user it names, so a fresh token of the same user continues).
func ptcOwner(key *ClientKey) string {
	sum := sha256.Sum256([]byte(key.TenantID + "\x00" + key.Key))
	return hex.EncodeToString(sum[:16])
}

// ptcToken is the continuation token: base64 of JSON {execution_id, step, ts}, upstream's layout plus
// the step its reply answered.
func ptcToken(executionID string, step int) string {
	b, _ := json.Marshal(map[string]any{"execution_id": executionID, "step": step, "ts": time.Now().UnixMilli()})
	return base64.StdEncoding.EncodeToString(b)
}

func parsePTCToken(tok string) (executionID string, step int, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(tok)
	if err != nil {
		return "", 0, false
	}
	var t struct {
		ExecutionID string `json:"execution_id"`
		Step        *int   `json:"step"`
		TS          int64  `json:"ts"`
	}
	if json.Unmarshal(raw, &t) != nil || !librechatIDPattern.MatchString(t.ExecutionID) || t.Step == nil {
		return "", 0, false
	}
	if t.TS > 0 && time.Since(time.UnixMilli(t.TS)) > ptcStateTTL {
		return "", 0, false
	}
	return t.ExecutionID, *t.Step, true
}

var librechatIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{21}$`)

// handleProgrammatic is POST /v1/exec/programmatic.
func (h *Hub) handleProgrammatic(w http.ResponseWriter, r *http.Request, key *ClientKey) {
	raw, err := readBody(r, h.cfg.MaxBody)
	if err != nil {
		ce := bodyError(err)
		writePTCError(w, ce.status, ce.message)
		return
	}
	var req ptcRequest
	if json.Unmarshal(raw, &req) != nil {
		writePTCError(w, http.StatusBadRequest, "Body must be a JSON object: {code, tools, lang?, timeout?, files?} or {continuation_token, tool_results}")
		return
	}
	cancel, fail := h.ptcReserve(r, key)
	if fail != nil {
		writePTCError(w, fail.status, fail.message)
		return
	}
	defer cancel.release()
	var reply []byte
	if req.ContinuationToken != "" {
		reply, fail = h.ptcContinue(r.Context(), key, &req, cancel)
	} else {
		reply, fail = h.ptcStart(r, key, &req, cancel)
	}
	if fail != nil {
		writePTCError(w, fail.status, fail.message)
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

// ptcStart validates a first request (upstream's messages), stores the execution and runs it once. Its
// worker pin (X-LibreChat-Code-Worker-ID, a signed token's code_worker_id) holds for every run of the
// execution, as upstream keeps the selected bridge worker in the execution's state.
func (h *Hub) ptcStart(r *http.Request, key *ClientKey, req *ptcRequest, cancel *ptcCancel) ([]byte, *ptcFail) {
	ctx := r.Context()
	st, fail := h.ptcNewState(key, req)
	if fail != nil {
		return nil, fail
	}
	pin, ce := h.pinnedWorker(r, key)
	if ce != nil {
		return nil, &ptcFail{ce.status, ce.message}
	}
	st.Pinned = pin
	// The files are resolved now, so that a bad reference is refused before anything runs.
	if _, _, ce := h.execInputs(ctx, key, st.Files, ptcEntry(st.Language)); ce != nil {
		return nil, &ptcFail{ce.status, ce.message}
	}
	st.BusyUntil = time.Now().Add(time.Duration(st.TimeoutMs)*time.Millisecond + ptcRunGrace + h.cfg.QueueTimeout)
	if fail := h.ptcUpdate(ctx, st.ExecutionID, func(old *ptcState) (*ptcState, *ptcFail) {
		if old != nil {
			return nil, &ptcFail{http.StatusConflict, "Execution ID collision; retry"}
		}
		return st, nil
	}); fail != nil {
		return nil, fail
	}
	return h.ptcStep(ctx, key, st, "", cancel)
}

// ptcNewState checks a first request and builds its execution.
func (h *Hub) ptcNewState(key *ClientKey, req *ptcRequest) (*ptcState, *ptcFail) {
	bad := func(msg string) (*ptcState, *ptcFail) { return nil, &ptcFail{http.StatusBadRequest, msg} }
	lang := "python"
	requested := req.Language
	if len(requested) == 0 || string(requested) == "null" {
		requested = req.Lang
	}
	if len(requested) > 0 && string(requested) != "null" {
		var s string
		if json.Unmarshal(requested, &s) != nil || (s != "python" && s != "bash") {
			return bad(fmt.Sprintf("Unsupported language %s; supported values are \"python\" and \"bash\"", requested))
		}
		lang = s
	}
	if req.Code == nil || *req.Code == "" {
		return bad("Missing required field: code")
	}
	var tools []ptcTool
	if json.Unmarshal(req.Tools, &tools) != nil || len(tools) == 0 {
		return bad("Missing required field: tools (must be a non-empty array of {name, description?, parameters?})")
	}
	if len(tools) > ptcMaxTools {
		return bad(fmt.Sprintf("Too many tools provided (%d). Maximum is %d.", len(tools), ptcMaxTools))
	}
	for i, t := range tools {
		if t.Name == "" || len(t.Name) > 256 || strings.ContainsFunc(t.Name, unicode.IsControl) {
			return bad(fmt.Sprintf("tools[%d].name must be a non-empty string of at most 256 characters without control characters", i))
		}
	}
	if msg := ptcNameCollision(lang, tools); msg != "" {
		return bad(msg)
	}
	timeout, err := h.ptcTimeout(req.Timeout)
	if err != nil {
		return bad(err.Error())
	}
	return &ptcState{
		ExecutionID: newSessionID(), SessionID: newSessionID(), TenantID: key.TenantID, Owner: ptcOwner(key),
		Language: lang, Code: *req.Code, Tools: tools, Files: req.Files, TimeoutMs: timeout.Milliseconds(),
		History: map[string]ptcHistoryEntry{},
	}, nil
}

// ptcTimeout is upstream's normalizeProgrammaticTimeoutMs: milliseconds, positive, capped by the hub's
// maximum; absent, the hub's exec timeout.
func (h *Hub) ptcTimeout(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return min(h.cfg.ExecTimeout, h.cfg.MaxTimeout), nil
	}
	var ms float64
	if json.Unmarshal(raw, &ms) != nil || ms <= 0 {
		return 0, errors.New("timeout must be a positive number of milliseconds")
	}
	return min(time.Duration(ms*float64(time.Millisecond)+0.999999), h.cfg.MaxTimeout).Round(time.Millisecond), nil
}

func ptcEntry(lang string) string {
	if lang == "bash" {
		return "main.sh"
	}
	return "main.py"
}

// ptcContinue takes a continuation: it checks the token, the caller and the results against the call
// the last run stopped at, records them, and runs the code again. A retry of a step already answered
// gets that answer.
func (h *Hub) ptcContinue(ctx context.Context, key *ClientKey, req *ptcRequest, cancel *ptcCancel) ([]byte, *ptcFail) {
	var results []ptcResult
	if json.Unmarshal(req.ToolResults, &results) != nil {
		return nil, &ptcFail{http.StatusBadRequest, "tool_results must be an array when continuation_token is provided"}
	}
	if len(results) == 0 {
		return nil, &ptcFail{http.StatusBadRequest, "tool_results must be a non-empty array; resubmit with at least one result per pending tool call"}
	}
	id, step, ok := parsePTCToken(req.ContinuationToken)
	if !ok {
		return nil, &ptcFail{http.StatusBadRequest, "Invalid continuation token"}
	}
	digest := sha256.Sum256(req.ToolResults)
	answered := hex.EncodeToString(digest[:])
	var replay []byte
	var st *ptcState
	fail := h.ptcUpdate(ctx, id, func(old *ptcState) (*ptcState, *ptcFail) {
		switch {
		case old == nil:
			return nil, &ptcFail{http.StatusNotFound, "Execution not found or expired"}
		case old.Owner != ptcOwner(key):
			return nil, &ptcFail{http.StatusForbidden, "Forbidden"}
		case step < old.Step-1 || step > old.Step:
			return nil, &ptcFail{http.StatusConflict, "This continuation_token was already used; continue with the newest one"}
		case step == old.Step-1 && old.Answered == answered && old.Last == nil:
			return nil, &ptcFail{http.StatusConflict, "This continuation was already answered, and its answer was too large to keep for a retry; start a new execution"}
		case step == old.Step-1 && old.Answered == answered && time.Now().After(old.BusyUntil):
			replay = old.Last // a retry of an answered step: the same answer, nothing runs again
			return nil, nil
		case step == old.Step-1:
			return nil, &ptcFail{http.StatusConflict, "This continuation_token was already used with other tool_results; continue with the newest one"}
		case time.Now().Before(old.BusyUntil):
			return nil, &ptcFail{http.StatusConflict, "Another continuation is already in flight for this execution; retry shortly"}
		case old.Done:
			return nil, &ptcFail{http.StatusConflict, "The execution has finished; start a new one"}
		}
		next := *old
		next.BusyUntil = time.Now().Add(time.Duration(next.TimeoutMs)*time.Millisecond + ptcRunGrace + h.cfg.QueueTimeout)
		st = &next
		if old.Pending == nil && old.Answered == answered {
			return st, nil // recorded, but its run never answered (its replica went away): run it now
		}
		if old.Pending == nil {
			return nil, &ptcFail{http.StatusConflict, "This continuation_token was already used with other tool_results; continue with the newest one"}
		}
		if fail := next.record(results); fail != nil {
			return nil, fail
		}
		next.Answered = answered
		return st, nil
	})
	if fail != nil {
		return nil, fail
	}
	if replay != nil {
		return replay, nil
	}
	return h.ptcStep(ctx, key, st, answered, cancel)
}

// record adds the result of the pending call to the history. Results for calls the execution never
// issued are refused: replay trusts the history, so a forged call_id would silently skip a real call.
func (s *ptcState) record(results []ptcResult) *ptcFail {
	seen := map[string]bool{}
	for i, res := range results {
		if res.CallID == "" {
			return &ptcFail{http.StatusBadRequest, fmt.Sprintf("tool_results[%d].call_id is required", i)}
		}
		if seen[res.CallID] {
			return &ptcFail{http.StatusBadRequest, fmt.Sprintf("tool_results[%d]: duplicate call_id %q", i, res.CallID)}
		}
		seen[res.CallID] = true
		if res.CallID != s.PendingID {
			return &ptcFail{http.StatusBadRequest, fmt.Sprintf("tool_results[%d]: call_id %q was not issued by this execution's last reply (it asked for %q)", i, res.CallID, s.PendingID)}
		}
	}
	res := results[0]
	e := *s.Pending
	e.IsError, e.ErrorMessage = res.IsError, res.ErrorMessage
	if !res.IsError {
		e.Result = res.Result
		if len(e.Result) == 0 {
			e.Result = json.RawMessage("null")
		}
	}
	history := make(map[string]ptcHistoryEntry, len(s.History)+1)
	for k, v := range s.History {
		history[k] = v
	}
	history[s.PendingID] = e
	s.History, s.Pending, s.PendingID = history, nil, ""
	if len(history) > ptcMaxCalls {
		return &ptcFail{http.StatusRequestEntityTooLarge, fmt.Sprintf("The execution made more than %d tool calls; break the work into several executions", ptcMaxCalls)}
	}
	return nil
}

// ptcStep runs the execution once and stores what it came to: the next pending call, or the end (the
// record is kept until it expires, so that a retried continuation gets the same answer).
func (h *Hub) ptcStep(ctx context.Context, key *ClientKey, st *ptcState, answered string, cancel *ptcCancel) ([]byte, *ptcFail) {
	rep, pending := h.ptcRun(ctx, key, st, cancel)
	if pending != nil {
		st.Pending, st.PendingID = &ptcHistoryEntry{ToolName: pending.ToolName, Input: pending.Input}, pending.CallID
		rep.ContinuationToken = ptcToken(st.ExecutionID, st.Step+1)
	} else {
		st.Done = true
	}
	body := marshalPlain(rep)
	fail := h.ptcUpdate(context.WithoutCancel(ctx), st.ExecutionID, func(old *ptcState) (*ptcState, *ptcFail) {
		if old == nil || old.Step != st.Step {
			return nil, &ptcFail{http.StatusConflict, "The execution changed while it ran; start a new one"}
		}
		next := *st
		next.Step, next.Last, next.Answered, next.BusyUntil = st.Step+1, body, answered, time.Time{}
		if len(body) > ptcMaxStateBytes/2 {
			// Too large to keep beside the state: the answer still goes out, a retry is told it was given.
			next.Last = nil
			if next.Done {
				next.History, next.Code, next.Tools = nil, "", nil
			}
		}
		return &next, nil
	})
	if fail != nil {
		return nil, fail
	}
	return body, nil
}

// ptcRun runs the generated program on a worker and reads its outcome: a pending call (the reply then
// lacks its token), or the end, completed or failed. Generated files are kept only at the end: every
// earlier run is a partial replay of the same code.
func (h *Hub) ptcRun(ctx context.Context, key *ClientKey, st *ptcState, cancel *ptcCancel) (*ptcReply, *ptcPending) {
	failed := func(msg string) (*ptcReply, *ptcPending) {
		return &ptcReply{Status: "error", Error: msg, SessionID: st.SessionID}, nil
	}
	if cancel.cancelled() {
		return failed("Programmatic execution request cancelled")
	}
	program := pythonProgram(st.ExecutionID, st.Code, st.Tools, st.History)
	if st.Language == "bash" {
		program = bashProgram(st.ExecutionID, st.Code, st.Tools, st.History)
	}
	inputs, readOnly, ce := h.execInputs(ctx, key, st.Files, ptcEntry(st.Language))
	if ce != nil {
		return failed(ce.message)
	}
	timeout := time.Duration(st.TimeoutMs) * time.Millisecond
	deadline := time.Now().Add(timeout + ptcRunGrace)
	d := &dispatchReq{caller: key, kind: bridge.KindSandbox, deadline: deadline, pinned: st.Pinned}
	// Every run is a fresh, stateless sandbox (upstream runs PTC stateless), even on a stateful worker.
	if ce := h.execSession(ctx, d, ""); ce != nil {
		return failed(ce.message)
	}
	body := execBody([2]string{st.Language, ptcEntry(st.Language)}, program, nil, inputs, d.sessionID, deadline, timeout)
	owner := &bridge.Object{}
	owner.Set(bridge.HeaderSessionOwner, bridge.SessionOwner(key.TenantID))
	d.request = assignmentRequest(body, owner)
	runCtx, stop := cancel.watch(ctx)
	out, err := h.dispatch(runCtx, d)
	stop()
	if cancel.cancelled() {
		return failed("Programmatic execution request cancelled")
	}
	if err != nil {
		ce := h.fail(err)
		return failed(strings.TrimSpace(ce.code + ": " + ce.message))
	}
	if out.status != bridge.StatusFulfilled {
		return failed(rejectionError(out).message)
	}
	return h.ptcOutcome(ctx, key, st, out.result, readOnly)
}

// ptcOutcome reads a settled run: the call it stopped at, or its end.
func (h *Hub) ptcOutcome(ctx context.Context, key *ClientKey, st *ptcState, result *bridge.Object, readOnly []string) (*ptcReply, *ptcPending) {
	run, _ := result.Get("run")
	ro, _ := run.(*bridge.Object)
	str := func(k string) string {
		if ro == nil {
			return ""
		}
		v, _ := ro.Get(k)
		s, _ := v.(string)
		return s
	}
	stdout, stderr := str("stdout"), str("stderr")
	if clean, p, ok := extractPending(stdout, st.ExecutionID); ok {
		rep := &ptcReply{Status: "tool_call_required", PartialStdout: clean, PartialStderr: stderr, SessionID: st.SessionID}
		known := false
		for _, t := range st.Tools {
			known = known || t.Name == p.ToolName
		}
		input, err := ptcInput(st.Language, p)
		switch {
		case !known:
			return &ptcReply{Status: "error", Error: "Sandbox requested an unregistered tool: " + p.ToolName, Stdout: &clean, Stderr: &stderr, SessionID: st.SessionID}, nil
		case err != nil:
			return &ptcReply{Status: "error", Error: err.Error(), Stdout: &clean, Stderr: &stderr, SessionID: st.SessionID}, nil
		}
		rep.ToolCalls = []ptcCall{{ID: p.CallID, Name: p.ToolName, Input: input}}
		return rep, &p
	}
	reply := h.execReply(ctx, key, st.SessionID, result, readOnly)
	so, _ := reply.Get("stdout")
	se, _ := reply.Get("stderr")
	outS, _ := so.(string)
	errS, _ := se.(string)
	rep := &ptcReply{Status: "completed", Stdout: &outS, Stderr: &errS, SessionID: st.SessionID}
	if f, ok := reply.Get("files"); ok {
		rep.Files, _ = bridge.Marshal(f)
	}
	if msg := ptcRunFailure(ro); msg != "" {
		rep.Status, rep.Error = "error", msg
	}
	return rep, nil
}

// ptcRunFailure says why a run did not succeed (upstream: "Sandbox exited with code N", or the runner's
// message for a run it stopped), or "".
func ptcRunFailure(run *bridge.Object) string {
	if run == nil {
		return "The worker's result has no run"
	}
	code, _ := run.Get("code")
	status, _ := run.Get("status")
	msg, _ := run.Get("message")
	c, exited := code.(float64)
	if m, ok := msg.(string); ok && m != "" && status != "RE" {
		return m // the runner stopped it: timeout, output or memory limit, signal
	}
	if exited && c != 0 {
		return fmt.Sprintf("Sandbox exited with code %d", int(c))
	}
	if m, ok := msg.(string); ok && m != "" && !exited {
		return m
	}
	return ""
}

// ptcInput is a pending call's input as the reply's JSON object. Python printed JSON; a bash tool got one
// argument, which must be a JSON object (none: {}).
func ptcInput(lang string, p ptcPending) (json.RawMessage, error) {
	text := strings.TrimSpace(p.Input)
	if text == "" && lang == "bash" {
		return json.RawMessage("{}"), nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &obj) != nil || obj == nil {
		fn := ptcFunctionName(lang, p.ToolName)
		return nil, fmt.Errorf("tool %s was called with an argument that is not a JSON object (%.80q); pass one JSON object string, e.g. %s '{\"key\": \"value\"}'", p.ToolName, text, fn)
	}
	return json.RawMessage(text), nil
}

// ptcUpdate changes an execution's record in one transaction: fn gets the stored state (nil: none) and
// returns the state to store (nil: no change) or a refusal.
func (h *Hub) ptcUpdate(ctx context.Context, executionID string, fn func(old *ptcState) (*ptcState, *ptcFail)) *ptcFail {
	var fail *ptcFail
	err := h.backend.Update(ctx, func(tx store.Txn) error {
		fail = nil
		got, err := tx.Get(ptcStateKey(executionID))
		if err != nil {
			return err
		}
		var old *ptcState
		if got[0] != nil {
			old = &ptcState{}
			if err := json.Unmarshal(got[0], old); err != nil {
				return store.Abort(errors.Join(store.ErrCorrupt, err))
			}
		}
		next, f := fn(old)
		if f != nil {
			fail = f
			return store.Abort(f)
		}
		if next == nil {
			return nil
		}
		b, _ := json.Marshal(next)
		if len(b) > ptcMaxStateBytes {
			fail = &ptcFail{http.StatusRequestEntityTooLarge, fmt.Sprintf("Request too large: the execution's state would be %d bytes (max %d). Reduce the size of \"code\", \"tools\" or the tool results, or break the work into several executions.", len(b), ptcMaxStateBytes)}
			return store.Abort(fail)
		}
		tx.Put(ptcStateKey(executionID), b, store.Volatile, tx.Now().Add(ptcStateTTL))
		return nil
	})
	if fail != nil {
		return fail
	}
	if err != nil {
		ce := h.fail(err)
		return &ptcFail{ce.status, ce.message}
	}
	return nil
}
