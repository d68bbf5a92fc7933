package debugger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/debugger"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/slots"
)

const fence = "```"

func block(label, code string) string { return fence + label + "\n" + code + "\n" + fence + "\n" }

// testMode is native wherever the host supports it; elsewhere off with a note, unless
// CODELLM_REQUIRE_SANDBOX=1 (CI), where that is a failure.
func testMode(t testing.TB) sandbox.Mode {
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

type envOpts struct {
	allowed     []string
	maxOutput   int64
	maxSessions int
	ttl         time.Duration
	maxBody     int64
	slots       *slots.Pool
	sealPath    string
}

// newEngine builds a production-shaped engine whose work root is checked for leftovers at cleanup.
func newEngine(t testing.TB, o envOpts) *engine.Engine {
	t.Helper()
	sb, err := sandbox.New(sandbox.Config{Mode: testMode(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	programs, err := interp.Enable(interp.Builtin(), o.allowed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.maxOutput == 0 {
		o.maxOutput = 1 << 20
	}
	if o.slots == nil {
		o.slots = slots.New(4, 5*time.Second)
	}
	root := t.TempDir()
	t.Cleanup(func() {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			t.Errorf("workdir left behind: %s", filepath.Join(root, e.Name()))
		}
	})
	return engine.New(engine.Config{
		Programs:  programs,
		Pipeline:  pipeline.Config{Sandbox: sb, WorkRoot: root, MaxOutputBytes: o.maxOutput, MaxStderrBytes: 64 << 10, KillGrace: time.Second},
		Slots:     o.slots,
		Timeout:   60 * time.Second,
		MaxBlocks: 64,
	}, nil)
}

type dbgServer struct {
	URL string
	eng *engine.Engine
	dbg *debugger.Debugger
}

// startDebugger serves a debugger on a loopback port and stops it (waiting for every handler) at cleanup.
func startDebugger(t testing.TB, o envOpts) *dbgServer {
	t.Helper()
	eng := newEngine(t, o)
	d, err := debugger.New(debugger.Config{Engine: eng, MaxSessions: o.maxSessions, SessionTTL: o.ttl,
		MaxBodyBytes: o.maxBody, KillGrace: time.Second, SealPath: o.sealPath})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("debugger did not stop")
		}
		http.DefaultClient.CloseIdleConnections()
	})
	return &dbgServer{URL: "http://" + ln.Addr().String(), eng: eng, dbg: d}
}

type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// obj decodes the reply as a JSON object.
func (r reply) obj(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("status %d: not a JSON object: %v: %s", r.Status, err, r.Body)
	}
	return m
}

// do sends a request. body: nil (none), string/[]byte (raw) or anything else (JSON). Headers come in
// pairs; Content-Type defaults to application/json for a body.
func (s *dbgServer) do(t testing.TB, method, path string, body any, hdr ...string) reply {
	t.Helper()
	var rdr io.Reader
	switch b := body.(type) {
	case nil:
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
	req, err := http.NewRequest(method, s.URL+path, rdr)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost || method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
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
	return reply{resp.StatusCode, resp.Header, out}
}

// wantError asserts an error envelope's status, code and (if non-empty) a message fragment.
func wantError(t testing.TB, r reply, status int, code, fragment string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &e); err != nil {
		t.Fatalf("status %d: not an error envelope: %v: %s", r.Status, err, r.Body)
	}
	if r.Status != status || e.Error.Code != code {
		t.Fatalf("got %d %q (%s), want %d %q", r.Status, e.Error.Code, e.Error.Message, status, code)
	}
	if fragment != "" && !strings.Contains(e.Error.Message, fragment) {
		t.Fatalf("message %q does not contain %q", e.Error.Message, fragment)
	}
	if e.Error.Param != nil || e.Error.Type == "" {
		t.Fatalf("bad envelope: %s", r.Body)
	}
}

func wantStatus(t testing.TB, r reply, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
}
