package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/packages"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// Routes of the runner API. SessionsPrefix takes the URL-escaped session ID after it.
const (
	PathExecute    = "/api/v2/execute"
	PathRuntimes   = "/api/v2/runtimes"
	PathHealth     = "/api/v2/health"
	PathPackages   = "/api/v2/packages"
	SessionsPrefix = "/api/v2/sessions/"
)

// Register mounts the runner API. route is the server's authenticated router (srv.Route); patterns are
// exact paths except SessionsPrefix, which ends in "/" and matches everything below it.
func (r *Runner) Register(route func(method, pattern, name string, h http.HandlerFunc)) {
	route(http.MethodPost, PathExecute, "runner.execute", r.handleExecute)
	route(http.MethodGet, PathRuntimes, "runner.runtimes", r.handleRuntimes)
	route(http.MethodGet, PathHealth, "runner.health", r.handleHealth)
	route(http.MethodGet, PathConnect, "runner.connect", r.handleConnect)
	route(http.MethodGet, PathPackages, "runner.packages", r.handlePackages)
	route(http.MethodDelete, SessionsPrefix, "runner.session.delete", r.handleDeleteSession)
}

// Handler returns the runner API on its own router (the worker's embedded supervisor, the
// /sessions/{id}/api/v2/ routes, tests). It performs no authentication. Unknown paths and methods are
// answered in the runner's JSON error body, like every other refusal of the API.
func (r *Runner) Handler() http.Handler {
	rt := httpserve.NewRouter(func(w http.ResponseWriter, req *http.Request) {
		writeError(w, &Error{Status: http.StatusNotFound, Message: "not found: no route for " + req.Method + " " + req.URL.Path, Kind: ErrBadRequest})
	}, func(w http.ResponseWriter, req *http.Request, allow []string) {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &Error{Status: http.StatusMethodNotAllowed, Kind: ErrBadRequest,
			Message: "method " + req.Method + " is not allowed on " + req.URL.Path + " (allowed: " + strings.Join(allow, ", ") + ")"})
	})
	r.Register(func(method, pattern, _ string, h http.HandlerFunc) { rt.HandleFunc(method+" "+pattern, h) })
	return rt
}

func (r *Runner) handleExecute(w http.ResponseWriter, req *http.Request) {
	sandbox.Trace("r.begin")
	defer sandbox.Trace("r.end")
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		writeError(w, &Error{Status: http.StatusUnsupportedMediaType, Kind: ErrUnsupportedMedia,
			Message: fmt.Sprintf("requests must be of type application/json (Piston's rule), got Content-Type %q", req.Header.Get("Content-Type"))})
		return
	}
	if req.ContentLength > r.cfg.MaxBodyBytes {
		writeError(w, tooLarge(r.cfg.MaxBodyBytes))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, tooLarge(r.cfg.MaxBodyBytes))
			return
		}
		writeError(w, badRequest("cannot read the request body: "+err.Error()))
		return
	}
	sid := ""
	if vals, ok := req.Header[http.CanonicalHeaderKey(wire.RuntimeSessionHeader)]; ok {
		if len(vals) != 1 {
			writeError(w, badRequest(wire.RuntimeSessionHeader+" must be sent once"))
			return
		}
		sid = vals[0]
		if e := checkSessionID(sid); e != nil {
			writeError(w, e)
			return
		}
	}
	status, reply, resp := r.executeJSON(WithOwner(req.Context(), ownerOf(req)), sid, body)
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter)
	}
	if resp != nil && resp.Deterministic != nil {
		w.Header().Set(wire.DeterminismHeader, resp.Deterministic.headerValue())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(reply)
}

// ExecuteJSON is POST /api/v2/execute without HTTP: body is the request JSON, sessionID the value of
// X-Runtime-Session-Id ("" = none). It returns the status and JSON body the endpoint would answer, for
// in-process callers that forward a runner request verbatim (the bridge worker's embedded supervisor,
// bridge-protocol.md §11.2). A 429 reply should carry Retry-After when forwarded over HTTP.
func (r *Runner) ExecuteJSON(ctx context.Context, sessionID string, body []byte) (status int, reply []byte) {
	status, reply, _ = r.executeJSON(ctx, sessionID, body)
	return status, reply
}

// executeJSON is ExecuteJSON that also returns the reply as a value (nil on an error).
func (r *Runner) executeJSON(ctx context.Context, sessionID string, body []byte) (int, []byte, *ExecuteResponse) {
	var er ExecuteRequest
	if e := decodeRequest(body, &er); e != nil {
		status, b := errorBody(e)
		return status, b, nil
	}
	resp, e := r.execute(ctx, sessionID, &er)
	if e != nil {
		status, b := errorBody(e)
		return status, b, nil
	}
	status, b := marshal(http.StatusOK, resp)
	return status, b, resp
}

// decodeRequest parses one JSON object. Unknown members are ignored (Piston clients send extras); a
// member of the wrong type, trailing data or a non-object is a 400 naming the problem.
func decodeRequest(body []byte, er *ExecuteRequest) *Error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return badRequest("the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(er); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "env_vars" && te.Type.Kind() == reflect.String {
			return badRequest("env_vars values must be strings, got JSON " + te.Value)
		}
		if errors.As(err, &te) && te.Field != "" {
			return badRequest(fmt.Sprintf("%s must be %s, got JSON %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value))
		}
		return badRequest("invalid JSON: " + strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("invalid JSON: trailing data after the request object")
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int64", "int":
		return "an integer"
	case "float64":
		return "a number"
	case "string", "ptr":
		return "a string"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return goKind
}

func tooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Kind: ErrTooLarge,
		Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
}

func (r *Runner) handleRuntimes(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, r.Runtimes())
}

// HealthStatus is the body of GET /api/v2/health.
type HealthStatus struct {
	Status   string `json:"status"` // "ok" | "unhealthy"
	Error    string `json:"error,omitempty"`
	Message  string `json:"message,omitempty"`
	Sandbox  string `json:"sandbox,omitempty"`
	Runtimes int    `json:"runtimes"`
	Sessions int    `json:"sessions"`
}

// Health checks what an execute needs: the runner is open, its work directory accepts a file, and the
// sandbox can run in its mode.
func (r *Runner) Health() HealthStatus {
	h := HealthStatus{Status: "ok", Sandbox: string(r.cfg.Sandbox.Mode()), Runtimes: len(r.runtimes), Sessions: r.Sessions()}
	bad := func(code, msg string) HealthStatus {
		h.Status, h.Error, h.Message = "unhealthy", code, msg
		return h
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return bad("workspace_unavailable", "the runner is shutting down")
	}
	f, err := os.CreateTemp(r.runsDir, "health-")
	if err != nil {
		return bad("workspace_unavailable", "cannot write to the work directory: "+err.Error())
	}
	f.Close()
	os.Remove(f.Name())
	if _, err := os.Stat(filepath.Join(r.sessDir)); err != nil {
		return bad("workspace_unavailable", "session directory: "+err.Error())
	}
	if rep := r.cfg.Sandbox.Report(); !rep.Ready {
		return bad("sandbox_unavailable", "the sandbox cannot run in mode "+string(rep.Mode)+"; missing: "+strings.Join(rep.Missing, ", "))
	}
	return h
}

// packageEntry is one element of GET /api/v2/packages: Piston's language, language_version and
// installed, plus the set's name and what it holds (codellm's package sets, not language runtimes).
type packageEntry struct {
	Language        string             `json:"language"`
	LanguageVersion string             `json:"language_version"`
	Installed       bool               `json:"installed"`
	Name            string             `json:"name"`
	Packages        []packages.Package `json:"packages"`
}

// handlePackages lists the operator's package sets (Piston's GET /api/v2/packages; sets are added on the
// host with `codellm packages add`, so the API installs nothing).
func (r *Runner) handlePackages(w http.ResponseWriter, _ *http.Request) {
	out := []packageEntry{}
	for _, s := range r.cfg.Packages {
		out = append(out, packageEntry{Language: s.Language, LanguageVersion: s.LanguageVersion, Installed: true,
			Name: s.Name, Packages: s.Packages})
	}
	writeJSON(w, http.StatusOK, out)
}

func (r *Runner) handleHealth(w http.ResponseWriter, _ *http.Request) {
	h := r.Health()
	code := http.StatusOK
	if h.Status != "ok" {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

// handleDeleteSession is DELETE /api/v2/sessions/{id}: 204 whether or not the session existed.
func (r *Runner) handleDeleteSession(w http.ResponseWriter, req *http.Request) {
	raw := strings.TrimPrefix(req.URL.EscapedPath(), SessionsPrefix)
	id, err := url.PathUnescape(raw)
	if err != nil || raw == "" || strings.Contains(raw, "/") {
		writeError(w, badRequest("the path must be "+SessionsPrefix+"{session id}, with the ID URL-escaped"))
		return
	}
	if err := r.ResetSession(id); err != nil {
		var e *Error
		if errors.As(err, &e) {
			writeError(w, e)
			return
		}
		writeError(w, sandboxFailed(err.Error(), err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// retryAfter is the Retry-After of 429 replies, in whole seconds: the service-wide default
// (openai-contract.md §6).
const retryAfter = "5"

func errorBody(e *Error) (int, []byte) {
	body := map[string]string{"message": e.Message}
	if e.Code != "" {
		body["error"] = e.Code
	}
	return marshal(e.Status, body)
}

func marshal(status int, v any) (int, []byte) {
	b, err := json.Marshal(v)
	if err != nil {
		return http.StatusInternalServerError, []byte(`{"error":"sandbox_execution_failed","message":"cannot encode the response"}` + "\n")
	}
	return status, append(b, '\n')
}

func writeError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter)
	}
	status, b := errorBody(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	status, b := marshal(status, v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
