package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/wire"
)

// maxRunnerReply bounds what a runner reply may occupy in memory (the hub's settle limit is 32 MiB).
const maxRunnerReply = 32 << 20

// RunnerCall is one sandbox assignment for a supervisor: the canonical bytes of request.body, the
// request.headers, and the runtime session ("" = stateless, no session header).
type RunnerCall struct {
	SessionID    string
	AssignmentID string // names the container of a stateless call (docker supervisors)
	Body         []byte
	Headers      [][2]string
	// Tree is request.body as bridge parsed it (Body is its canonical encoding), or nil. The embedded chat
	// operation reads the request from it instead of parsing Body again (issue 15 item 3).
	Tree *bridge.Object
	// Owner is the tenant the hub dispatched the call for (bridge.HeaderSessionOwner, taken out of
	// Headers), "" when the hub named none: the embedded runner's per-owner session cap counts by it.
	Owner string
}

// RunError is a runner failure. KnownClean is §6.4's "known-clean rejection": the runner was never reached,
// or it answered 4xx other than 408/429 with error ≠ session_workspace_dirty — state cannot have changed.
type RunError struct {
	Message    string
	Status     int // 0 when no reply arrived
	KnownClean bool
}

func (e *RunError) Error() string { return e.Message }

// Supervisor runs sandbox assignments (§11.1).
type Supervisor interface {
	// Stateful reports whether every runtime session gets its own persistent workspace.
	Stateful() bool
	// Execute forwards one request and returns the runner's JSON object reply, or a *RunError.
	Execute(ctx context.Context, call RunnerCall) (*bridge.Object, error)
	// Reset discards a session's local state (reset-workspace).
	Reset(ctx context.Context, sessionID string) error
	// Quarantine discards a session whose state is unknown (§6.4).
	Quarantine(ctx context.Context, sessionID string) error
	// Label is the default sandboxProfile capability.
	Label() string
}

// classify turns a runner HTTP reply into a result or a *RunError (§11.1).
func classify(status int, body []byte) (*bridge.Object, error) {
	if status >= 200 && status < 300 {
		o, err := bridge.ParseObject(body)
		if err != nil {
			return nil, &RunError{Message: "Sandbox returned an invalid JSON object", Status: status}
		}
		return o, nil
	}
	msg := fmt.Sprintf("Sandbox rejected execution with HTTP %d", status)
	code := ""
	if o, err := bridge.ParseObject(body); err == nil {
		if v, ok := o.Get("error"); ok {
			switch e := v.(type) {
			case string:
				code = e
				if e != "" {
					msg = e
				}
			case *bridge.Object: // OpenAI envelope from the chat pipeline
				if m, ok := e.Get("message"); ok {
					if s, ok := m.(string); ok && s != "" {
						msg = s
					}
				}
			}
		}
		if code != "" {
			if m, ok := o.Get("message"); ok {
				if s, ok := m.(string); ok && s != "" {
					msg = code + ": " + s
				}
			}
		} else if m, ok := o.Get("message"); ok {
			if s, ok := m.(string); ok && s != "" {
				msg = s
			}
		}
	}
	// codellm's 501 deterministic_unavailable is a refusal before anything ran, too: the sandbox cannot
	// honour a deterministic request (wire.CodeDeterministicUnavailable). So is its 429
	// too_many_sessions: the session table had no room, and the session was never made. Taken as
	// ambiguous, it quarantined the worker when one tenant opened more sessions than the table holds
	// (issue 35 item 2).
	clean := (status >= 400 && status < 500 && status != http.StatusRequestTimeout &&
		status != http.StatusTooManyRequests && code != wire.CodeSessionWorkspaceDirty) ||
		(status == http.StatusNotImplemented && code == wire.CodeDeterministicUnavailable) ||
		(status == http.StatusTooManyRequests && code == runner.CodeTooManySessions)
	return nil, &RunError{Message: msg, Status: status, KnownClean: clean}
}

// Embedded is the default supervisor: codellm's runner (and chat pipeline) in this process, called
// through their HTTP handlers without a socket so the semantics are exactly those of POST /api/v2/execute.
type Embedded struct {
	Runner   *runner.Runner
	Chat     http.Handler // serves POST /v1/chat/completions; nil disables the chat operation
	stateful bool
	runnerH  http.Handler
}

// NewEmbedded wraps r. stateful gives each runtime session its own persistent runner workspace
// (CODELLM_STATEFUL_WORKSPACE).
func NewEmbedded(r *runner.Runner, chat http.Handler, stateful bool) *Embedded {
	return &Embedded{Runner: r, Chat: chat, stateful: stateful, runnerH: r.Handler()}
}

func (e *Embedded) Stateful() bool { return e.stateful }
func (e *Embedded) Label() string  { return "codellm-embedded" }

func (e *Embedded) Execute(ctx context.Context, call RunnerCall) (*bridge.Object, error) {
	h, path := e.runnerH, runner.PathExecute
	if headerValue(call.Headers, wire.OperationHeader) == wire.OperationChat {
		if e.Chat == nil {
			return nil, &RunError{Message: "this worker has no chat pipeline", Status: http.StatusNotFound, KnownClean: true}
		}
		h, path = e.Chat, "/v1/chat/completions"
		ctx = openai.WithChatTree(ctx, call.Tree)
	}
	if call.Owner != "" {
		ctx = runner.WithOwner(ctx, call.Owner)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost"+path, bytes.NewReader(call.Body)) // a loopback Host: the server's Host rule applies in-process too
	if err != nil {
		return nil, &RunError{Message: err.Error(), KnownClean: true}
	}
	applyHeaders(req, call)
	rec := &replyBuffer{header: http.Header{}}
	h.ServeHTTP(rec, req)
	if rec.overflow {
		return nil, &RunError{Message: "Sandbox reply exceeds the size limit", Status: rec.status}
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return classify(rec.status, rec.body.Bytes())
}

func (e *Embedded) Reset(_ context.Context, sessionID string) error {
	return e.Runner.ResetSession(sessionID)
}
func (e *Embedded) Quarantine(_ context.Context, sessionID string) error {
	return e.Runner.ResetSession(sessionID)
}

func applyHeaders(req *http.Request, call RunnerCall) {
	for _, kv := range call.Headers {
		req.Header.Add(kv[0], kv[1])
	}
	req.Header.Set("Content-Type", "application/json")
	if call.SessionID != "" {
		req.Header.Set(wire.RuntimeSessionHeader, call.SessionID)
	} else {
		req.Header.Del(wire.RuntimeSessionHeader)
	}
}

func headerValue(h [][2]string, name string) string {
	for _, kv := range h {
		if strings.EqualFold(kv[0], name) {
			return kv[1]
		}
	}
	return ""
}

// replyBuffer is an in-memory http.ResponseWriter with a size cap.
type replyBuffer struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	overflow bool
}

func (r *replyBuffer) Header() http.Header { return r.header }
func (r *replyBuffer) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *replyBuffer) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(b) > maxRunnerReply {
		r.overflow = true
		return 0, errors.New("reply too large")
	}
	return r.body.Write(b)
}
func (r *replyBuffer) Flush() {}

// Endpoint calls a loopback runner over HTTP (§11.3). A {runtimeSessionId} placeholder in the URL makes it
// stateful: each session then reaches its own runner URL and carries X-Runtime-Session-Id.
type Endpoint struct {
	URL    string
	Client *http.Client
}

// PlaceholderSession is the session placeholder of an endpoint URL.
const PlaceholderSession = "{runtimeSessionId}"

// NewEndpoint validates the endpoint (loopback unless allowRemote) and strips a trailing '/'.
func NewEndpoint(raw string, allowRemote bool, client *http.Client) (*Endpoint, error) {
	raw = strings.TrimRight(raw, "/")
	u, err := url.Parse(strings.ReplaceAll(raw, PlaceholderSession, "x"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: invalid sandbox endpoint %q", ErrConfig, raw)
	}
	if !allowRemote && !loopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("%w: sandbox endpoint %q is not loopback (use --allow-remote-endpoint)", ErrConfig, raw)
	}
	if client == nil {
		client = &http.Client{}
	}
	return &Endpoint{URL: raw, Client: client}, nil
}

// loopbackHost is codellm's one loopback rule (internal/listen).
func loopbackHost(h string) bool { return listen.IsLoopbackHost(h) }

func (e *Endpoint) Stateful() bool { return strings.Contains(e.URL, PlaceholderSession) }
func (e *Endpoint) Label() string  { return "nsjail" }

func (e *Endpoint) Execute(ctx context.Context, call RunnerCall) (*bridge.Object, error) {
	base := e.URL
	if e.Stateful() {
		if call.SessionID == "" {
			// §11.1: an assignment without a runtime session (a chat) runs in session assignment-<id>.
			call.SessionID = "assignment-" + call.AssignmentID
		}
		base = strings.ReplaceAll(base, PlaceholderSession, bridge.EscapeWorkerID(call.SessionID))
	} else {
		call.SessionID = ""
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/execute", bytes.NewReader(call.Body))
	if err != nil {
		return nil, &RunError{Message: err.Error(), KnownClean: true}
	}
	applyHeaders(req, call)
	resp, err := e.Client.Do(req)
	if err != nil {
		// Only a failed dial proves the runner never saw the request.
		var op *net.OpError
		clean := errors.As(err, &op) && op.Op == "dial"
		return nil, &RunError{Message: "Sandbox request failed: " + err.Error(), KnownClean: clean}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRunnerReply+1))
	if err != nil || len(body) > maxRunnerReply {
		return nil, &RunError{Message: "Sandbox reply could not be read", Status: resp.StatusCode}
	}
	return classify(resp.StatusCode, body)
}

// Reset and Quarantine do nothing locally for an endpoint: the runner owns the state (§11.3).
func (e *Endpoint) Reset(context.Context, string) error      { return nil }
func (e *Endpoint) Quarantine(context.Context, string) error { return nil }
