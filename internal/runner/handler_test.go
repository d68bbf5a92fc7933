package runner

import (
	"net/http"
	"strings"
	"testing"
)

// Unknown paths and methods of the runner's own handler answer in the runner's JSON error body (they
// were net/http's text/plain "404 page not found" and "Method Not Allowed" before), and no path is
// redirected.
func TestHandlerRefusalsAreJSON(t *testing.T) {
	tr := newRunner(t, nil)
	for _, c := range []struct {
		method, path string
		status       int
		message      string
		allow        string
	}{
		{"GET", "/api/v2/nope", 404, "not found: no route for GET /api/v2/nope", ""},
		{"GET", "/api/v2/execute", 405, "method GET is not allowed on /api/v2/execute (allowed: POST)", "POST"},
		{"POST", "/api/v2/runtimes", 405, "method POST is not allowed on /api/v2/runtimes (allowed: GET)", "GET"},
		{"DELETE", "/api/v2/sessions", 404, "not found: no route for DELETE /api/v2/sessions", ""},
		{"GET", "/api/v2//runtimes", 404, "not found: no route for GET /api/v2//runtimes", ""},
	} {
		status, body, hdr := tr.do(c.method, c.path, nil, nil)
		if status != c.status || body["message"] != c.message || hdr.Get("Allow") != c.allow ||
			!strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Errorf("%s %s = %d %v Allow %q (%s), want %d %q Allow %q", c.method, c.path, status, body,
				hdr.Get("Allow"), hdr.Get("Content-Type"), c.status, c.message, c.allow)
		}
	}
	if status, _, _ := tr.do(http.MethodGet, PathRuntimes, nil, nil); status != http.StatusOK {
		t.Errorf("GET %s = %d", PathRuntimes, status)
	}
}
