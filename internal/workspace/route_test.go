package workspace

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/wire"
)

// The runtime command route answers exactly as the reference runner's: 404 when not enabled, 401 without
// the exact capability, 415, 400 for a missing session or a malformed body (nothing runs), 409 for another
// session, and the §9.8 result otherwise — run in the sandbox against the mounted root.
func TestCommandRoute(t *testing.T) {
	sb := nativeSandbox(t)
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		os.Chown(dir, sandboxUID, sandboxUID)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		os.Chown(filepath.Join(dir, "sub"), sandboxUID, sandboxUID)
	}
	ws, err := Open(dir, Options{AllowCommands: true, AllowWrites: true, Sandbox: sb, HomeDir: "/nonexistent-home"})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	token := strings.Repeat("k", 43)
	h := CommandRoute(ws, token)
	call := func(h http.HandlerFunc, hdr map[string]string, body string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, PathCommandRoute, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(TokenHeader, token)
		req.Header.Set(wire.RuntimeSessionHeader, "workspace-a")
		for k, v := range hdr {
			if v == "" {
				req.Header.Del(k)
			} else {
				req.Header.Set(k, v)
			}
		}
		rec := httptest.NewRecorder()
		h(rec, req)
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("reply is not JSON: %d %q", rec.Code, rec.Body)
		}
		return rec.Code, m
	}
	ok := `{"command":"echo made > made.txt; pwd","cwd":"sub","timeoutMs":20000,"maxOutputBytes":4096}`
	for _, tc := range []struct {
		name   string
		h      http.HandlerFunc
		hdr    map[string]string
		body   string
		status int
		msg    string
	}{
		{"disabled", CommandRoute(nil, token), nil, ok, 404, "Not Found"},
		{"short token", CommandRoute(ws, "short"), map[string]string{TokenHeader: "short"}, ok, 404, "Not Found"},
		{"no token", h, map[string]string{TokenHeader: ""}, ok, 401, "Unauthorized"},
		{"wrong token", h, map[string]string{TokenHeader: strings.Repeat("x", 43)}, ok, 401, "Unauthorized"},
		{"token prefix", h, map[string]string{TokenHeader: token[:42]}, ok, 401, "Unauthorized"},
		{"not json", h, map[string]string{"Content-Type": "text/plain"}, ok, 415, "requests must be of type application/json"},
		{"no session", h, map[string]string{wire.RuntimeSessionHeader: ""}, ok, 400, "X-Runtime-Session-Id is required"},
		{"unknown key", h, nil, `{"command":"touch x","shell":"sh"}`, 400, "Command request is invalid"},
		{"blank command", h, nil, `{"command":"  "}`, 400, "command must not be blank"},
		{"escaping cwd", h, nil, `{"command":"touch x","cwd":"../x"}`, 400, ".. segment"},
		{"timeout range", h, nil, `{"command":"touch x","timeoutMs":300001}`, 400, "timeoutMs"},
	} {
		status, m := call(tc.h, tc.hdr, tc.body)
		if status != tc.status || !strings.Contains(m["message"].(string), tc.msg) {
			t.Errorf("%s: %d %v, want %d %q", tc.name, status, m, tc.status, tc.msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Fatalf("a refused request ran: %v", err)
	}
	status, m := call(h, nil, ok)
	if status != 200 || m["exitCode"] != float64(0) || !strings.HasSuffix(m["stdout"].(string), "/sub\n") || m["timedOut"] != false {
		t.Fatalf("command: %d %v", status, m)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "made.txt")); err != nil || string(b) != "made\n" {
		t.Fatalf("the command did not write the mounted root: %q %v", b, err)
	}
	if status, m := call(h, map[string]string{wire.RuntimeSessionHeader: "workspace-b"}, ok); status != 409 || m["error"] != "session_workspace_dirty" {
		t.Fatalf("another session: %d %v", status, m)
	}
}
