package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/server"
	"github.com/codellm/codellm/internal/slots"
)

// testMode is the sandbox mode the tests run under: native wherever the host supports it. On a host
// without it the suite falls back to off with a note, unless CODELLM_REQUIRE_SANDBOX=1 (CI), where that
// is a failure.
func testMode(t *testing.T) sandbox.Mode {
	t.Helper()
	rep := sandbox.Probe(sandbox.Config{Mode: sandbox.ModeNative})
	if rep.Ready {
		return sandbox.ModeNative
	}
	if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
		t.Fatalf("native sandbox unavailable (missing %v) and CODELLM_REQUIRE_SANDBOX=1", rep.Missing)
	}
	t.Logf("native sandbox unavailable here (missing %v): running unsandboxed", rep.Missing)
	return sandbox.ModeOff
}

type testServer struct {
	URL      string
	Key      string
	srv      *server.Server
	sb       *sandbox.Sandbox
	workRoot string
	logs     *bytes.Buffer
}

type options struct {
	cfg      func(*server.Config)
	ecfg     func(*engine.Config)
	allowed  []string
	skipWait bool
	limits   sandbox.Limits // the sandbox's (zero fields: its defaults)
}

// startServer runs a real server on a loopback port and stops it (waiting for every handler) at cleanup.
func startServer(t *testing.T, o options) *testServer {
	t.Helper()
	logs := &bytes.Buffer{}
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sb, err := sandbox.New(sandbox.Config{Mode: testMode(t), Logger: log, Limits: o.limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	programs, err := interp.Enable(interp.Builtin(), o.allowed, nil)
	if err != nil {
		t.Fatal(err)
	}
	workRoot := t.TempDir()
	ecfg := engine.Config{
		Programs:  programs,
		Pipeline:  pipeline.Config{Sandbox: sb, WorkRoot: workRoot, MaxOutputBytes: 1 << 20, MaxStderrBytes: 64 << 10},
		Slots:     slots.New(4, 5*time.Second),
		Timeout:   60 * time.Second,
		MaxBlocks: 64,
	}
	cfg := server.Config{Listen: "127.0.0.1:0", Logger: log, KillGrace: time.Second}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	if o.ecfg != nil {
		o.ecfg(&ecfg)
	}
	srv, err := server.New(cfg, ecfg, sb)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	ts := &testServer{URL: "http://" + ln.Addr().String(), Key: cfg.APIKey, srv: srv, sb: sb, workRoot: workRoot, logs: logs}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(90 * time.Second):
			t.Errorf("server did not stop")
		}
		http.DefaultClient.CloseIdleConnections()
		assertNoWorkdirs(t, workRoot)
	})
	if !o.skipWait {
		ts.waitReady(t)
	}
	return ts
}

func (ts *testServer) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		rd := ts.srv.Readiness()
		if rd.Ready {
			return
		}
		if rd.Reason != "" && !strings.Contains(rd.Reason, "has not finished") {
			t.Fatalf("server not ready: %s", rd.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("server did not become ready")
}

// assertNoWorkdirs fails when a run left anything under the work root.
func assertNoWorkdirs(t *testing.T, root string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		t.Errorf("workdir left behind: %s", filepath.Join(root, e.Name()))
	}
}

type lockedWriter struct {
	mu chan struct{}
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	if l.mu == nil {
		l.mu = make(chan struct{}, 1)
	}
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.w.Write(p)
}

// post sends a raw JSON body and returns status, headers and body.
func (ts *testServer) post(t *testing.T, path string, body any, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	var rdr io.Reader
	switch b := body.(type) {
	case string:
		rdr = strings.NewReader(b)
	case []byte:
		rdr = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rdr = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(http.MethodPost, ts.URL+path, rdr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if ts.Key != "" {
		req.Header.Set("Authorization", "Bearer "+ts.Key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, out
}

func (ts *testServer) get(t *testing.T, path string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
	if ts.Key != "" {
		req.Header.Set("Authorization", "Bearer "+ts.Key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out
}

// chat wraps a body into a one-user-message request.
func chat(body string) map[string]any {
	return map[string]any{"model": "codellm", "messages": []any{map[string]any{"role": "user", "content": body}}}
}

type envelope struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// wantError asserts an error reply's status, code and (if non-empty) a message fragment.
func wantError(t *testing.T, status int, body []byte, wantStatus int, wantCode, fragment string) envelope {
	t.Helper()
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("status %d: body is not an error envelope: %v: %s", status, err, body)
	}
	if status != wantStatus || e.Error.Code != wantCode {
		t.Fatalf("got %d %q (%s), want %d %q", status, e.Error.Code, e.Error.Message, wantStatus, wantCode)
	}
	if fragment != "" && !strings.Contains(e.Error.Message, fragment) {
		t.Fatalf("message %q does not contain %q", e.Error.Message, fragment)
	}
	if e.Error.Param != nil {
		t.Fatalf("param = %v, want null", *e.Error.Param)
	}
	return e
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens, CompletionTokens, TotalTokens int
	} `json:"usage"`
	Debug map[string]any `json:"x_codellm_debug"`
}

// call is a parsed tool call: name and decoded arguments.
type call struct {
	Name string
	Args map[string]any
}

func decodeCompletion(t *testing.T, status int, body []byte) (completion, []call) {
	t.Helper()
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	var c completion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("bad completion: %v: %s", err, body)
	}
	if len(c.Choices) != 1 {
		t.Fatalf("choices = %d", len(c.Choices))
	}
	var calls []call
	for i, tc := range c.Choices[0].Message.ToolCalls {
		if !freshCallID(tc.ID) || tc.Type != "function" {
			t.Fatalf("tool call %d: id %q type %q", i, tc.ID, tc.Type)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
			t.Fatalf("arguments of %s are not JSON: %v", tc.Function.Name, err)
		}
		calls = append(calls, call{tc.Function.Name, args})
	}
	return c, calls
}

var (
	callIDRE    = regexp.MustCompile(`^call_[A-Za-z0-9]{24}$`)
	callIDsMu   sync.Mutex
	callIDsSeen = map[string]bool{}
)

// freshCallID reports whether id has OpenAI's call-id form and was never seen before in this test
// process: ids must be unique across responses (@openai/agents refuses a reused one).
func freshCallID(id string) bool {
	callIDsMu.Lock()
	defer callIDsMu.Unlock()
	if !callIDRE.MatchString(id) || callIDsSeen[id] {
		return false
	}
	callIDsSeen[id] = true
	return true
}
