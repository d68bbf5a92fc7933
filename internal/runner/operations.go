package runner

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/codellm/codellm/internal/wire"
)

// What a bridge worker that is not codellm's (LibreChat's @librechat/code worker) needs from
// `codellm serve` to run every hub assignment against it over HTTP:
//
//   - the hub marks a chat assignment with X-Codellm-Operation: openai.chat.completions, and a worker
//     forwards the request's headers with the body to {endpoint}/execute: the execute route hands such
//     a request to the chat pipeline (the chat completions handler), like codellm's embedded worker;
//   - the worker's stateful endpoint mode names the session in the URL
//     ({endpoint} = http://127.0.0.1:2000/sessions/{runtimeSessionId}/api/v2): /sessions/{id}/api/v2/…
//     answers like /api/v2/… with X-Runtime-Session-Id set to {id}.

const (
	// SessionPathPrefix is the stateful endpoint mode's route prefix.
	SessionPathPrefix = "/sessions/"
	chatPath          = "/v1/chat/completions"
)

// RegisterBridge mounts the runner API like Register, with the chat operation on execute (served by
// chat, the main listener's handler) and the /sessions/{id}/api/v2/ routes.
func (r *Runner) RegisterBridge(route func(method, pattern, name string, h http.HandlerFunc), chat http.Handler) {
	api := r.Handler()
	r.Register(func(method, pattern, name string, h http.HandlerFunc) {
		if pattern == PathExecute {
			h = withOperations(h, chat)
		}
		route(method, pattern, name, h)
	})
	sessions := func(w http.ResponseWriter, req *http.Request) { r.serveSessionPath(w, req, api, chat) }
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		route(m, SessionPathPrefix, "runner.session_path", sessions)
	}
}

// withOperations dispatches on X-Codellm-Operation: absent is the runner, the chat operation goes to
// chat, anything else is refused (400: retrying cannot help).
func withOperations(runnerH http.HandlerFunc, chat http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		switch op := req.Header.Get(wire.OperationHeader); op {
		case "":
			runnerH(w, req)
		case wire.OperationChat:
			if chat == nil {
				writeError(w, badRequest("this runner serves no chat operation"))
				return
			}
			inner := rewrite(req, chatPath)
			inner.Header.Del(wire.OperationHeader)
			chat.ServeHTTP(w, inner)
		default:
			writeError(w, badRequest("unknown "+wire.OperationHeader+" "+strings.TrimSpace(op)+" (known: "+wire.OperationChat+")"))
		}
	}
}

// serveSessionPath serves /sessions/{id}/api/v2/{rest} as /api/v2/{rest} in session {id}.
func (r *Runner) serveSessionPath(w http.ResponseWriter, req *http.Request, api, chat http.Handler) {
	rest := strings.TrimPrefix(req.URL.EscapedPath(), SessionPathPrefix)
	esc, tail, ok := strings.Cut(rest, "/")
	id, err := url.PathUnescape(esc)
	if !ok || err != nil || id == "" || !strings.HasPrefix("/"+tail, "/api/v2/") {
		writeError(w, &Error{Status: http.StatusNotFound, Message: "not found: use /sessions/{id}/api/v2/…", Kind: ErrBadRequest})
		return
	}
	if e := checkSessionID(id); e != nil {
		writeError(w, e)
		return
	}
	if h := req.Header.Values(wire.RuntimeSessionHeader); len(h) > 0 && (len(h) != 1 || h[0] != id) {
		writeError(w, badRequest(wire.RuntimeSessionHeader+" names another session than the path"))
		return
	}
	inner := rewrite(req, "/"+tail)
	inner.Header.Set(wire.RuntimeSessionHeader, id)
	if inner.URL.Path == PathExecute && req.Method == http.MethodPost {
		withOperations(api.ServeHTTP, chat)(w, inner)
		return
	}
	api.ServeHTTP(w, inner)
}

// rewrite returns req aimed at another path.
func rewrite(req *http.Request, p string) *http.Request {
	out := req.Clone(req.Context())
	out.URL.Path, out.URL.RawPath = p, ""
	out.RequestURI = p
	if req.URL.RawQuery != "" {
		out.RequestURI += "?" + req.URL.RawQuery
	}
	return out
}
