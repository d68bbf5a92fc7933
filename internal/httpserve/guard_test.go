package httpserve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/httpguard"
)

func TestGuardAndJSONBodies(t *testing.T) {
	refuse := func(w http.ResponseWriter, r *http.Request, ref *httpguard.Refusal) {
		http.Error(w, ref.Code, ref.Status)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	exempt := func(r *http.Request) bool { return r.URL.Path == "/healthz" }
	h := Guard(&httpguard.Policy{CheckHost: true}, exempt, refuse, JSONBodies(refuse, ok))
	for _, c := range []struct {
		method, target, host, origin, ct string
		status                           int
		code                             string
	}{
		{"POST", "/x", "127.0.0.1:1", "", "application/json", 204, ""},
		{"POST", "/x", "evil.example", "", "application/json", 403, "bad_host"},
		{"GET", "/healthz", "10.0.0.1:1", "", "", 204, ""},
		{"GET", "/x", "localhost", "https://evil.example", "", 403, "bad_origin"},
		{"POST", "/x", "localhost", "", "text/plain", 415, "unsupported_media_type"},
		{"GET", "/x", "localhost", "", "", 204, ""},
	} {
		r := httptest.NewRequest(c.method, c.target, strings.NewReader("{}"))
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.ct != "" {
			r.Header.Set("Content-Type", c.ct)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != c.status || strings.TrimSpace(rec.Body.String()) != c.code {
			t.Errorf("%s %s Host %q Origin %q CT %q = %d %q, want %d %q", c.method, c.target, c.host, c.origin, c.ct,
				rec.Code, rec.Body.String(), c.status, c.code)
		}
	}
}
