package debugger

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/apierror"
	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/sealform"
)

// routes registers every endpoint on the router; the session routes carry their id in the path.
func (d *Debugger) routes() *httpserve.Router {
	rt := httpserve.NewRouter(func(w http.ResponseWriter, r *http.Request) {
		fail(w, openai.NewError(http.StatusNotFound, "not_found", "no route for %s %s", r.Method, r.URL.Path))
	}, func(w http.ResponseWriter, r *http.Request, allow []string) {
		e := openai.NewError(http.StatusMethodNotAllowed, "method_not_allowed", "method %s is not allowed on %s (allowed: %s)",
			r.Method, r.URL.Path, strings.Join(allow, ", "))
		fail(w, e.WithHeader("Allow", strings.Join(allow, ", ")))
	})
	for pattern, h := range map[string]func(w http.ResponseWriter, r *http.Request, id string){
		"GET /{$}":                        d.handleUI,
		"GET /debug/blocks":               d.handleBlocks,
		"POST /debug/blocks":              d.handleBlocks,
		"POST /debug/run-block":           d.handleRunBlock,
		"POST /debug/sessions":            d.handleCreate,
		"GET /debug/sessions/{id}":        d.handleGet,
		"DELETE /debug/sessions/{id}":     d.handleDelete,
		"POST /debug/sessions/{id}/step":  d.handleStep,
		"PUT /debug/sessions/{id}/buffer": d.handleBuffer,
		"POST /debug/sessions/{id}/reset": d.handleReset,
	} {
		rt.Handle(pattern, d.route(h))
	}
	seal := sealform.Handler(func(w http.ResponseWriter, _ *http.Request, e *openai.Error) { fail(w, e) })
	for _, m := range []string{"GET ", "POST "} {
		rt.Handle(m+d.cfg.SealPath, d.route(func(w http.ResponseWriter, r *http.Request, _ string) { seal.ServeHTTP(w, r) }))
	}
	return rt
}

// route wraps an endpoint: after routing, the JSON content type keeps cross-site forms out (they cannot
// send it without a preflight, never granted) and a role lookup is refused with its own code.
func (d *Debugger) route(h func(w http.ResponseWriter, r *http.Request, id string)) http.Handler {
	return httpserve.JSONBodies(refuse, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); q.Has("path") || q.Has("role") {
			fail(w, errRoleLookup())
			return
		}
		h(w, r, r.PathValue("id"))
	}))
}

// refuse answers a request httpguard refused (Host, Origin, content type).
func refuse(w http.ResponseWriter, _ *http.Request, ref *httpguard.Refusal) {
	fail(w, openai.NewError(ref.Status, ref.Code, "%s", ref.Message))
}

// serveHTTP applies §14.1's request hygiene before any route: the Host check defeats DNS rebinding and a
// foreign Origin is refused.
func (d *Debugger) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &httpserve.StatusWriter{ResponseWriter: w}
	defer func() {
		d.log.Debug("debug request", "method", r.Method, "path", r.URL.Path, "status", sw.Status,
			"duration_ms", time.Since(start).Milliseconds())
	}()
	d.guarded.ServeHTTP(sw, r)
}

func errRoleLookup() *openai.Error {
	return openai.NewError(http.StatusBadRequest, "role_lookup_unsupported", "role lookup is not supported; post the rendered body")
}

// debugGuard is the debugger's request policy: loopback Host names only (it never has operator names)
// and no foreign Origin.
var debugGuard = &httpguard.Policy{CheckHost: true}

func fail(w http.ResponseWriter, e *openai.Error) {
	if e.Status == 499 {
		return // the client went away: nobody to answer
	}
	openai.WriteError(w, e)
}

// apiError maps the debugger's own sentinels, then defers to the chat path's mapping.
func apiError(err error) *openai.Error {
	var (
		re *RangeError
		be *BufferSizeError
	)
	switch {
	case errors.As(err, &re):
		return openai.NewError(http.StatusBadRequest, "block_out_of_range", "%s", re.Error())
	case errors.As(err, &be):
		return openai.NewError(http.StatusRequestEntityTooLarge, "request_too_large", "%s", be.Error())
	case errors.Is(err, ErrSessionNotFound):
		return openai.NewError(http.StatusNotFound, "session_not_found", "%s", err.Error())
	case errors.Is(err, ErrSessionDone):
		return openai.NewError(http.StatusConflict, "session_done", "%s", err.Error())
	case errors.Is(err, ErrStepInProgress):
		return openai.NewError(http.StatusConflict, "step_in_progress", "%s", err.Error())
	case errors.Is(err, ErrTooManySessions):
		return openai.NewError(http.StatusTooManyRequests, "too_many_sessions", "%s", err.Error())
	case errors.Is(err, context.Canceled):
		return openai.NewError(499, "cancelled", "the client went away")
	}
	return apierror.Map(err, 5*time.Second)
}

// fields is a decoded request object.
type fields map[string]json.RawMessage

// readObject reads a JSON object body. Unknown fields are refused (a misspelt "stdin" would otherwise be
// silently ignored and the step fed the buffer); "role" and "path" are fleet's role lookup. An empty body
// is {} when emptyOK.
func (d *Debugger) readObject(w http.ResponseWriter, r *http.Request, emptyOK bool, known ...string) (fields, *openai.Error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, openai.NewError(http.StatusRequestEntityTooLarge, "request_too_large",
				"request body exceeds %d bytes", d.cfg.MaxBodyBytes)
		}
		if r.Context().Err() != nil {
			return nil, openai.NewError(499, "cancelled", "the client went away")
		}
		return nil, openai.NewError(http.StatusBadRequest, "invalid_json", "cannot read request body: %v", err)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		if emptyOK {
			return fields{}, nil
		}
		return nil, openai.NewError(http.StatusBadRequest, "invalid_json", "request body is empty: want a JSON object")
	}
	var f fields
	if err := json.Unmarshal(raw, &f); err != nil || f == nil {
		msg := "request body is not a JSON object"
		if err != nil {
			msg += ": " + err.Error()
		}
		return nil, openai.NewError(http.StatusBadRequest, "invalid_json", "%s", msg)
	}
	// fleet's debug client always sends "role" (and may send "path"); empty or null means "the body is
	// inline", anything else is a lookup codellm cannot do.
	for _, k := range []string{"role", "path"} {
		if raw, ok := f[k]; ok {
			if v := string(bytes.TrimSpace(raw)); v != `""` && v != "null" {
				return nil, errRoleLookup()
			}
			delete(f, k)
		}
	}
	for k := range f {
		if !contains(known, k) {
			return nil, openai.NewError(http.StatusBadRequest, "invalid_json", "unknown field %q (known: %s)",
				k, strings.Join(known, ", "))
		}
	}
	return f, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// body returns the required markdown body.
func (f fields) body() (string, *openai.Error) {
	raw, ok := f["body"]
	if !ok || string(raw) == "null" {
		return "", openai.NewError(http.StatusBadRequest, "invalid_messages", "body is required: post the markdown body as a string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", openai.NewError(http.StatusBadRequest, "invalid_messages", "body must be a string")
	}
	return s, nil
}

// input returns the bag as compact JSON (nil when absent or null — fleet sends "input": null without a
// bag — so the pipeline writes "{}").
func (f fields) input() []byte {
	raw, ok := f["input"]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil // unreachable: raw came from a valid document
	}
	return buf.Bytes()
}

// bytesField reads name as a string or name_base64 as exact bytes; present reports whether either was
// given (a present "" is distinct from absent).
func (f fields) bytesField(name string) (b []byte, present bool, e *openai.Error) {
	raw, hasText := f[name]
	raw64, has64 := f[name+"_base64"]
	if hasText && has64 {
		return nil, false, openai.NewError(http.StatusBadRequest, "invalid_json", "give %s or %s_base64, not both", name, name)
	}
	switch {
	case hasText:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, openai.NewError(http.StatusBadRequest, "invalid_json", "%s must be a string", name)
		}
		return []byte(s), true, nil
	case has64:
		var s string
		if err := json.Unmarshal(raw64, &s); err != nil {
			return nil, false, openai.NewError(http.StatusBadRequest, "invalid_json", "%s_base64 must be a string", name)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, false, openai.NewError(http.StatusBadRequest, "invalid_json", "%s_base64 is not standard base64: %v", name, err)
		}
		return b, true, nil
	}
	return nil, false, nil
}

func (d *Debugger) handleBlocks(w http.ResponseWriter, r *http.Request, _ string) {
	var body string
	if r.Method == http.MethodPost {
		f, e := d.readObject(w, r, false, "body")
		if e != nil {
			fail(w, e)
			return
		}
		if body, e = f.body(); e != nil {
			fail(w, e)
			return
		}
	} else {
		q := r.URL.Query()
		if !q.Has("body") {
			fail(w, openai.NewError(http.StatusBadRequest, "invalid_messages", "body is required: GET /debug/blocks?body=<markdown>"))
			return
		}
		body = q.Get("body")
	}
	blocks, err := ListBlocks(d.eng, body)
	if err != nil {
		fail(w, apiError(err))
		return
	}
	openai.WriteJSON(w, http.StatusOK, map[string]any{"blocks": blocks})
}

func (d *Debugger) handleRunBlock(w http.ResponseWriter, r *http.Request, _ string) {
	f, e := d.readObject(w, r, false, "body", "block", "stdin", "stdin_base64", "input", "metadata")
	if e != nil {
		fail(w, e)
		return
	}
	body, e := f.body()
	if e != nil {
		fail(w, e)
		return
	}
	// A missing block is block 0: fleet's client omits the field at its zero value.
	index := 0
	if raw, ok := f["block"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &index); err != nil {
			fail(w, openai.NewError(http.StatusBadRequest, "invalid_json", "block must be an integer, got %s", truncate(string(raw), 40)))
			return
		}
	}
	stdin, _, e := f.bytesField("stdin")
	if e != nil {
		fail(w, e)
		return
	}
	det, e := d.determinism(w, f)
	if e != nil {
		fail(w, e)
		return
	}
	run, err := RunBlockWith(r.Context(), d.eng, body, index, stdin, f.input(), det)
	if err != nil {
		fail(w, apiError(err))
		return
	}
	openai.WriteJSON(w, http.StatusOK, run.Object())
}

func (d *Debugger) handleCreate(w http.ResponseWriter, r *http.Request, _ string) {
	f, e := d.readObject(w, r, false, "body", "input", "metadata")
	if e != nil {
		fail(w, e)
		return
	}
	body, e := f.body()
	if e != nil {
		fail(w, e)
		return
	}
	det, e := d.determinism(w, f)
	if e != nil {
		fail(w, e)
		return
	}
	s, err := NewSession(d.eng, body, f.input())
	if err != nil {
		fail(w, apiError(err))
		return
	}
	s.SetDeterminism(det)
	if err := d.sessions.add(s); err != nil {
		s.Close()
		fail(w, apiError(err))
		return
	}
	openai.WriteJSON(w, http.StatusCreated, s.State(d.cfg.SessionTTL).Object())
}

func (d *Debugger) handleGet(w http.ResponseWriter, r *http.Request, id string) {
	s, err := d.sessions.get(id)
	if err != nil {
		fail(w, apiError(err))
		return
	}
	openai.WriteJSON(w, http.StatusOK, s.State(d.cfg.SessionTTL).Object())
}

func (d *Debugger) handleDelete(w http.ResponseWriter, r *http.Request, id string) {
	if err := d.sessions.remove(id); err != nil {
		fail(w, apiError(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Debugger) handleStep(w http.ResponseWriter, r *http.Request, id string) {
	f, e := d.readObject(w, r, true, "stdin", "stdin_base64")
	if e != nil {
		fail(w, e)
		return
	}
	stdin, present, e := f.bytesField("stdin")
	if e != nil {
		fail(w, e)
		return
	}
	if present && stdin == nil {
		stdin = []byte{} // a present "" is fed as empty stdin, not the buffer
	}
	s, err := d.sessions.get(id)
	if err != nil {
		fail(w, apiError(err))
		return
	}
	res, err := s.Step(r.Context(), stdin)
	if err != nil {
		fail(w, apiError(err))
		return
	}
	openai.WriteJSON(w, http.StatusOK, res.Object())
}

func (d *Debugger) handleBuffer(w http.ResponseWriter, r *http.Request, id string) {
	f, e := d.readObject(w, r, false, "buffer", "buffer_base64")
	if e != nil {
		fail(w, e)
		return
	}
	buf, present, e := f.bytesField("buffer")
	if e != nil {
		fail(w, e)
		return
	}
	if !present {
		fail(w, openai.NewError(http.StatusBadRequest, "invalid_json", "buffer or buffer_base64 is required"))
		return
	}
	s, err := d.sessions.get(id)
	if err != nil {
		fail(w, apiError(err))
		return
	}
	if err := s.SetBuffer(buf); err != nil {
		fail(w, apiError(err))
		return
	}
	openai.WriteJSON(w, http.StatusOK, s.State(d.cfg.SessionTTL).Object())
}

func (d *Debugger) handleReset(w http.ResponseWriter, r *http.Request, id string) {
	if _, e := d.readObject(w, r, true); e != nil {
		fail(w, e)
		return
	}
	s, err := d.sessions.get(id)
	if err != nil {
		fail(w, apiError(err))
		return
	}
	if err := s.Reset(); err != nil {
		fail(w, apiError(err))
		return
	}
	openai.WriteJSON(w, http.StatusOK, s.State(d.cfg.SessionTTL).Object())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
