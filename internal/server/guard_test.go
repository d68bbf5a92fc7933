package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/apierror"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/server"
)

const csrfBody = `{"model":"codellm","messages":[{"role":"user","content":"` + "```bash\\necho '{\\\"answer\\\":\\\"pwned\\\"}'\\n```" + `"}]}`

// browserPost sends what a cross-site page can send without a preflight: a CORS-simple content type, its
// own Origin, and (after DNS rebinding) its own name as Host.
func browserPost(t *testing.T, url, path, ctype, host, origin string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(csrfBody))
	req.Header.Set("Content-Type", ctype)
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBrowserCSRFAndRebinding (red-team item 3): with the README's default (loopback, no key) a web page
// could run code through a text/plain or form body, from its own origin, or under its own Host after DNS
// rebinding. The protection switched off by configuration (the page's names allowed) shows the attack
// running code; with the default policy each vector is refused before anything runs.
func TestBrowserCSRFAndRebinding(t *testing.T) {
	open := startServer(t, options{cfg: func(c *server.Config) {
		c.Listen = "127.0.0.1:8080"
		c.AllowedHosts = []string{"rebind.attacker.example"}
		c.AllowedOrigins = []string{"http://attacker.example"}
	}})
	if st, b := browserPost(t, open.URL, "/v1/chat/completions", "application/json", "rebind.attacker.example", "http://attacker.example"); st != 200 || !strings.Contains(b, "pwned") {
		t.Fatalf("with the page's names allowed the attack should run code: %d %s", st, b)
	}
	ts := startServer(t, options{cfg: func(c *server.Config) { c.Listen = "127.0.0.1:8080" }})
	for _, c := range []struct {
		name, ctype, host, origin string
		status                    int
		code                      string
	}{
		{"text/plain form", "text/plain", "", "", 415, "unsupported_media_type"},
		{"urlencoded form", "application/x-www-form-urlencoded", "", "", 415, "unsupported_media_type"},
		{"multipart form", "multipart/form-data; boundary=x", "", "", 415, "unsupported_media_type"},
		{"rebinding Host", "application/json", "rebind.attacker.example:8080", "", 403, "bad_host"},
		{"foreign Origin", "application/json", "", "http://attacker.example", 403, "bad_origin"},
		{"null Origin", "application/json", "", "null", 403, "bad_origin"},
	} {
		st, b := browserPost(t, ts.URL, "/v1/chat/completions", c.ctype, c.host, c.origin)
		var env struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal([]byte(b), &env)
		if st != c.status || env.Error.Code != c.code || strings.Contains(b, "pwned") {
			t.Errorf("%s: %d %s, want %d %s", c.name, st, b, c.status, c.code)
		}
	}
	// A rebinding page cannot read the runner API or the metrics either.
	for _, path := range []string{"/metrics", "/v1/models", "/readyz"} {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		req.Host = "rebind.attacker.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("GET %s under a rebinding Host: %d, want 403", path, resp.StatusCode)
		}
	}
	// The service's own origin (a same-origin page, e.g. a local UI) still works.
	if st, b := browserPost(t, ts.URL, "/v1/chat/completions", "application/json", "", ts.URL); st != 200 {
		t.Errorf("same-origin request: %d %s", st, b)
	}
}

// TestPublicListenerProbes: a public listener with --allowed-hosts still answers orchestrator probes that
// come by pod IP, but not a chat under that foreign Host.
func TestPublicListenerProbes(t *testing.T) {
	ts := startServer(t, options{cfg: func(c *server.Config) {
		c.Listen = "0.0.0.0:8080"
		c.InsecurePublic = true
		c.AllowedHosts = []string{"codellm.svc"}
	}})
	req, _ := http.NewRequest(http.MethodGet, ts.URL+"/healthz", nil)
	req.Host = "10.1.2.3:8080"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("probe by pod IP: %d", resp.StatusCode)
	}
	if st, _ := browserPost(t, ts.URL, "/v1/chat/completions", "application/json", "10.1.2.3:8080", ""); st != 403 {
		t.Errorf("chat under a non-allowed Host: %d, want 403", st)
	}
	if st, b := browserPost(t, ts.URL, "/v1/chat/completions", "application/json", "codellm.svc:8080", ""); st != 200 {
		t.Errorf("chat under an allowed Host: %d %s", st, b)
	}
}

// TestDescriptorExhaustionIsNotSandboxUnavailable (red-team item 4): a run that cannot open a pipe because
// the process is out of descriptors was answered 422 sandbox_unavailable, as if the sandbox were broken.
// It is now 503 descriptors_exhausted with Retry-After; a genuine sandbox failure stays 422.
func TestDescriptorExhaustionIsNotSandboxUnavailable(t *testing.T) {
	emfile := &pipeline.Error{Code: pipeline.CodeSandboxUnavailable, Message: "block 1/2: sandbox unavailable: x",
		Cause: fmt.Errorf("sandbox: spec pipe: %w", &os.SyscallError{Syscall: "pipe2", Err: syscall.EMFILE})}
	e := apierror.Map(emfile, 5*time.Second)
	if e.Status != 503 || e.Code != "descriptors_exhausted" || e.Header.Get("Retry-After") == "" ||
		!strings.HasPrefix(e.Message, "block 1/2: ") {
		t.Fatalf("EMFILE: %+v", e)
	}
	broken := &pipeline.Error{Code: pipeline.CodeSandboxUnavailable, Message: "block 1/1: sandbox unavailable: x",
		Cause: fmt.Errorf("sandbox: %w", syscall.EPERM)}
	if e := apierror.Map(broken, 5*time.Second); e.Status != 422 || e.Code != "sandbox_unavailable" {
		t.Fatalf("EPERM: %+v", e)
	}
}

// TestRunnerRoutesRefuseInPistonEnvelope: a body that is not JSON on a route registered with Route (the
// runner API, /api/v2/…) is refused 415 {"message"}, the envelope Piston clients parse, never the OpenAI
// one; the chat routes keep theirs. No handler runs.
func TestRunnerRoutesRefuseInPistonEnvelope(t *testing.T) {
	ts := startServer(t, options{})
	ran := false
	ts.srv.Route(http.MethodPost, "/api/v2/execute", "runner.execute", func(w http.ResponseWriter, _ *http.Request) { ran = true })
	for _, ctype := range []string{"", "text/plain"} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/api/v2/execute", strings.NewReader(`{"language":"bash"}`))
		req.Header.Del("Content-Type")
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil || resp.StatusCode != 415 || len(body) != 1 ||
			!strings.HasPrefix(fmt.Sprint(body["message"]), "requests must be of type application/json") {
			t.Errorf("Content-Type %q: %d %s, want 415 with only a message", ctype, resp.StatusCode, raw)
		}
	}
	if ran {
		t.Error("the handler ran for a refused body")
	}
	if st, b := browserPost(t, ts.URL, "/v1/chat/completions", "text/plain", "", ""); st != 415 || !strings.Contains(b, `"code":"unsupported_media_type"`) {
		t.Errorf("chat route: %d %s, want the OpenAI envelope", st, b)
	}
}
