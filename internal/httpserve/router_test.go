package httpserve

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func testRouter() *Router {
	rt := NewRouter(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nf "+r.URL.Path, http.StatusNotFound)
	}, func(w http.ResponseWriter, r *http.Request, allow []string) {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		http.Error(w, "mna "+strings.Join(allow, ","), http.StatusMethodNotAllowed)
	})
	named := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s id=%s", name, r.PathValue("id"))
		}
	}
	rt.HandleFunc("GET /v1/models", named("models"))
	rt.HandleFunc("GET /v1/models/", named("model"))
	rt.HandleFunc("POST /v1/chat", named("chat"))
	rt.HandleFunc("DELETE /s/{id}", named("del"))
	rt.HandleFunc("GET /s/{id}", named("get"))
	rt.HandleFunc("/any", named("any"))
	rt.HandleFunc("GET /{$}", named("root"))
	rt.HandleFunc("DELETE /sessions/", named("sessions"))
	return rt
}

func TestRouter(t *testing.T) {
	rt := testRouter()
	for _, c := range []struct {
		method, target string
		status         int
		body, allow    string
	}{
		{"GET", "/v1/models", 200, "models id=", ""},
		{"HEAD", "/v1/models", 200, "models id=", ""}, // the recorder keeps a HEAD body; the server drops it
		{"POST", "/v1/models", 405, "mna GET", "GET"},
		{"GET", "/v1/models/codellm", 200, "model id=", ""},
		{"GET", "/v1/models/a/b", 200, "model id=", ""},
		{"GET", "/v1/chat", 405, "mna POST", "POST"},
		{"POST", "/v1/chat", 200, "chat id=", ""},
		{"GET", "/s/abc", 200, "get id=abc", ""},
		{"PUT", "/s/abc", 405, "mna DELETE,GET", "DELETE, GET"},
		{"GET", "/s/abc/", 404, "nf /s/abc/", ""},
		{"PATCH", "/any", 200, "any id=", ""},
		{"GET", "/", 200, "root id=", ""},
		{"GET", "/nowhere", 404, "nf /nowhere", ""},
		// No redirects: unclean paths and a subtree's bare root are not found.
		{"GET", "/v1//models", 404, "nf /v1//models", ""},
		{"GET", "/v1/./models", 404, "nf /v1/./models", ""},
		{"GET", "/v1/models/../models", 404, "nf /v1/models/../models", ""},
		{"DELETE", "/sessions", 404, "nf /sessions", ""},
		{"DELETE", "/sessions/x", 200, "sessions id=", ""},
	} {
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
		body := strings.TrimSpace(rec.Body.String())
		if rec.Code != c.status || body != c.body || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s = %d %q Allow %q, want %d %q Allow %q", c.method, c.target, rec.Code, body,
				rec.Header().Get("Allow"), c.status, c.body, c.allow)
		}
		if rec.Code == 301 || rec.Code == 307 || rec.Code == 308 || rec.Header().Get("Location") != "" {
			t.Errorf("%s %s redirected", c.method, c.target)
		}
	}
}

// A route registered while serving is found, and registering a path's own pattern after its subtree
// replaces the not-found placeholder.
func TestRouterLateRegistration(t *testing.T) {
	rt := testRouter()
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, httptest.NewRequest("DELETE", "/sessions", nil))
	if rec.Code != 404 {
		t.Fatalf("before: %d", rec.Code)
	}
	rt.HandleFunc("DELETE /sessions", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	rec = httptest.NewRecorder()
	rt.ServeHTTP(rec, httptest.NewRequest("DELETE", "/sessions", nil))
	if rec.Code != 204 {
		t.Fatalf("after: %d", rec.Code)
	}
}
