package debugger_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/debugger"
	"github.com/codellm/codellm/internal/slots"
)

func TestCheckListen(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9091", "127.1.2.3:0", "[::1]:9091", "localhost:9091", "LOCALHOST:1"} {
		if err := debugger.CheckListen(addr); err != nil {
			t.Errorf("CheckListen(%q) = %v, want nil", addr, err)
		}
	}
	for _, addr := range []string{"0.0.0.0:9091", ":9091", "[::]:9091", "10.0.0.1:9091", "example.com:80", "127.0.0.1", "localhost"} {
		err := debugger.CheckListen(addr)
		if !errors.Is(err, debugger.ErrNotLoopback) {
			t.Fatalf("CheckListen(%q) = %v, want ErrNotLoopback", addr, err)
		}
		want := `debug listener must bind loopback (127.0.0.1, [::1] or localhost), got "` + addr + `"`
		if err.Error() != want {
			t.Errorf("message %q, want %q", err.Error(), want)
		}
	}
	// ListenAndServe refuses before listening.
	d, err := debugger.New(debugger.Config{Engine: newEngine(t, envOpts{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ListenAndServe(context.Background(), "0.0.0.0:0"); !errors.Is(err, debugger.ErrNotLoopback) {
		t.Fatalf("ListenAndServe(0.0.0.0:0) = %v", err)
	}
}

func TestRequestHygiene(t *testing.T) {
	s := startDebugger(t, envOpts{})
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	body := map[string]any{"body": block("bash", "echo hi")}

	t.Run("foreign Host is 403 bad_host", func(t *testing.T) {
		for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.nip.io:" + port, "10.0.0.1:" + port} {
			wantError(t, s.do(t, "POST", "/debug/blocks", body, "Host", host), 403, "bad_host", host)
			wantError(t, s.do(t, "GET", "/", nil, "Host", host), 403, "bad_host", "")
		}
		for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "localhost", "127.0.0.2"} {
			wantStatus(t, s.do(t, "POST", "/debug/blocks", body, "Host", host), 200)
		}
	})
	t.Run("POST and PUT need application/json", func(t *testing.T) {
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"} {
			r := s.do(t, "POST", "/debug/blocks", body, "Content-Type", ct)
			wantError(t, r, 415, "unsupported_media_type", "")
			r = s.do(t, "PUT", "/debug/sessions/00/buffer", map[string]any{"buffer": "x"}, "Content-Type", ct)
			wantError(t, r, 415, "unsupported_media_type", "")
		}
		wantStatus(t, s.do(t, "POST", "/debug/blocks", body, "Content-Type", "application/json; charset=utf-8"), 200)
	})
	t.Run("role lookup", func(t *testing.T) {
		wantError(t, s.do(t, "GET", "/debug/blocks?path=roles/x.md", nil), 400, "role_lookup_unsupported", "post the rendered body")
		wantError(t, s.do(t, "POST", "/debug/run-block?path=roles/x.md", map[string]any{"body": "x", "block": 0}), 400, "role_lookup_unsupported", "")
		wantError(t, s.do(t, "POST", "/debug/sessions", map[string]any{"role": "indexer"}), 400, "role_lookup_unsupported", "")
		wantError(t, s.do(t, "POST", "/debug/blocks", map[string]any{"role": "indexer", "body": "x"}), 400, "role_lookup_unsupported", "")
	})
	t.Run("routes", func(t *testing.T) {
		wantError(t, s.do(t, "GET", "/v1/chat/completions", nil), 404, "not_found", "")
		wantError(t, s.do(t, "GET", "/debug/sessions/abc/nope", nil), 404, "not_found", "")
		wantError(t, s.do(t, "GET", "/debug/sessions/", nil), 404, "not_found", "")
		r := s.do(t, "DELETE", "/debug/blocks", nil)
		wantError(t, r, 405, "method_not_allowed", "")
		if got := r.Header.Get("Allow"); got != "GET, POST" {
			t.Fatalf("Allow = %q", got)
		}
		r = s.do(t, "GET", "/debug/run-block", nil)
		wantError(t, r, 405, "method_not_allowed", "")
		if got := r.Header.Get("Allow"); got != "POST" {
			t.Fatalf("Allow = %q", got)
		}
		// A CORS preflight is never granted: a foreign origin is refused outright, and even a same-origin
		// OPTIONS finds no such method.
		r = s.do(t, "OPTIONS", "/debug/sessions", nil, "Origin", "http://evil.example", "Access-Control-Request-Method", "POST")
		wantError(t, r, 403, "bad_origin", "")
		if r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatal("preflight granted")
		}
		r = s.do(t, "OPTIONS", "/debug/sessions", nil, "Access-Control-Request-Method", "POST")
		wantError(t, r, 405, "method_not_allowed", "")
		if r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatal("preflight granted")
		}
	})
	t.Run("UI page", func(t *testing.T) {
		r := s.do(t, "GET", "/", nil)
		wantStatus(t, r, 200)
		if ct := r.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Fatalf("Content-Type %q", ct)
		}
		csp := r.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'unsafe-inline'", "style-src 'unsafe-inline'", "connect-src 'self'"} {
			if !strings.Contains(csp, want) {
				t.Fatalf("CSP %q lacks %q", csp, want)
			}
		}
		page := string(r.Body)
		if !strings.Contains(page, "<title>codellm step debugger</title>") {
			t.Fatal("not the step UI")
		}
		// No external resources: nothing is loaded from another origin.
		for _, bad := range []string{"http://", "https://", " src=", "<link", "@import"} {
			if strings.Contains(page, bad) {
				t.Fatalf("page contains %q", bad)
			}
		}
		if r := s.do(t, "HEAD", "/", nil); r.Status != 200 || len(r.Body) != 0 {
			t.Fatalf("HEAD: %d %d bytes", r.Status, len(r.Body))
		}
	})
}

func TestBlocks(t *testing.T) {
	s := startDebugger(t, envOpts{allowed: []string{"bash", "python"}})
	body := block("bash", "echo hi") + "prose\n" + block("kotlin", "println(1)")
	want := `{"blocks":[{"index":0,"lang":"bash","program":"bash","allowed":true,"code":"echo hi\n"},` +
		`{"index":1,"lang":"kotlin","program":"","allowed":false,"code":"println(1)\n","error":"code block 2: language \"kotlin\" is not supported`
	for _, r := range []reply{
		s.do(t, "GET", "/debug/blocks?body="+url.QueryEscape(body), nil),
		s.do(t, "POST", "/debug/blocks", map[string]any{"body": body}),
	} {
		wantStatus(t, r, 200)
		if !strings.HasPrefix(string(r.Body), want) {
			t.Fatalf("got %s\nwant prefix %s", r.Body, want)
		}
		if !strings.Contains(string(r.Body), `"error_code":"unknown_language"`) {
			t.Fatalf("no error_code: %s", r.Body)
		}
	}
	// A registered program that is not enabled keeps its name.
	r := s.do(t, "POST", "/debug/blocks", map[string]any{"body": block("perl", "print 1")})
	got := r.obj(t)["blocks"].([]any)[0].(map[string]any)
	if got["program"] != "perl" || got["allowed"] != false || got["error_code"] != "program_not_allowed" {
		t.Fatalf("perl block: %v", got)
	}
	for _, b := range []string{"", "just prose\n"} {
		r := s.do(t, "POST", "/debug/blocks", map[string]any{"body": b})
		if r.Status != 200 || strings.TrimSpace(string(r.Body)) != `{"blocks":[]}` {
			t.Fatalf("%q: %d %s", b, r.Status, r.Body)
		}
	}
	wantError(t, s.do(t, "POST", "/debug/blocks", map[string]any{"body": block("bash", "ok") + "```bash\necho never\n"}), 422, "unclosed_fence", "never closed")
	wantError(t, s.do(t, "GET", "/debug/blocks", nil), 400, "invalid_messages", "")
	wantError(t, s.do(t, "POST", "/debug/blocks", map[string]any{}), 400, "invalid_messages", "")
	wantError(t, s.do(t, "POST", "/debug/blocks", map[string]any{"body": 3}), 400, "invalid_messages", "string")
	wantError(t, s.do(t, "POST", "/debug/blocks", `{"body":`), 400, "invalid_json", "")
	wantError(t, s.do(t, "POST", "/debug/blocks", `[1]`), 400, "invalid_json", "")
	wantError(t, s.do(t, "POST", "/debug/blocks", ``), 400, "invalid_json", "empty")
	wantError(t, s.do(t, "POST", "/debug/blocks", map[string]any{"body": "", "bdy": 1}), 400, "invalid_json", `unknown field "bdy"`)
}

func TestRunBlock(t *testing.T) {
	s := startDebugger(t, envOpts{allowed: []string{"bash", "python"}})
	t.Run("success with stdin and input", func(t *testing.T) {
		r := s.do(t, "POST", "/debug/run-block", `{"body":"`+"```bash\\ncat\\n```"+`","block":0,"stdin":"ping","input":{"depth":0}}`)
		wantStatus(t, r, 200)
		m := r.obj(t)
		want := map[string]any{"block": 0.0, "blocks_total": 1.0, "lang": "bash", "program": "bash", "stdout": "ping",
			"stderr": "", "ok": true, "exit_code": 0.0}
		for k, v := range want {
			if !reflect.DeepEqual(m[k], v) {
				t.Errorf("%s = %#v, want %#v", k, m[k], v)
			}
		}
		if _, ok := m["duration_ms"].(float64); !ok {
			t.Errorf("duration_ms missing: %s", r.Body)
		}
		if _, ok := m["error"]; ok {
			t.Errorf("error present on success: %s", r.Body)
		}
		in := s.do(t, "POST", "/debug/run-block", `{"body":"`+"```bash\\ncat \\\"$FLEET_INPUT\\\"; printf '|'; cat\\n```"+`","block":0,`+
			`"input": {"depth": 0, "a": [1, "x"]}}`)
		if got := in.obj(t)["stdout"]; got != `{"depth":0,"a":[1,"x"]}|` {
			t.Fatalf("input/stdin: %q", got)
		}
		def := s.do(t, "POST", "/debug/run-block", map[string]any{"body": block("bash", `cat "$FLEET_INPUT"; printf '|'; cat`), "block": 0})
		if got := def.obj(t)["stdout"]; got != `{}|` {
			t.Fatalf("default input/stdin: %q", got)
		}
	})
	t.Run("failure is 200 with ok false", func(t *testing.T) {
		body := block("bash", "echo partial; echo boom >&2; exit 3") + block("bash", "cat")
		r := s.do(t, "POST", "/debug/run-block", map[string]any{"body": body, "block": 0})
		wantStatus(t, r, 200)
		m := r.obj(t)
		if m["ok"] != false || m["error"] != "block 1/2: non-zero exit (code 3): boom" || m["exit_code"] != 3.0 ||
			m["stdout"] != "partial\n" || m["stderr"] != "boom\n" || m["blocks_total"] != 2.0 {
			t.Fatalf("failure reply: %s", r.Body)
		}
		r = s.do(t, "POST", "/debug/run-block", map[string]any{"body": block("python", "import ctypes\nctypes.string_at(0)"), "block": 0})
		m = r.obj(t)
		if r.Status != 200 || m["ok"] != false || m["exit_code"] != nil || m["signal"] != "SIGSEGV" ||
			!strings.HasPrefix(m["error"].(string), "block 1/1: killed by signal SIGSEGV") {
			t.Fatalf("signal reply: %s", r.Body)
		}
	})
	t.Run("non-UTF-8 output has base64 siblings", func(t *testing.T) {
		r := s.do(t, "POST", "/debug/run-block", map[string]any{"body": block("bash", `printf 'a\377b'; printf '\376' >&2`), "block": 0})
		m := r.obj(t)
		if m["stdout"] != "a\uFFFDb" || m["stdout_base64"] != "Yf9i" || m["stderr_base64"] != "/g==" {
			t.Fatalf("byte fields: %s", r.Body)
		}
	})
	t.Run("only the named block must resolve", func(t *testing.T) {
		body := block("bash", "echo one") + block("kotlin", "x") + block("perl", "y")
		r := s.do(t, "POST", "/debug/run-block", map[string]any{"body": body, "block": 0})
		if m := r.obj(t); r.Status != 200 || m["stdout"] != "one\n" || m["blocks_total"] != 3.0 {
			t.Fatalf("block 0: %s", r.Body)
		}
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": body, "block": 1}), 422, "unknown_language", "kotlin")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": body, "block": 2}), 422, "program_not_allowed", "perl")
	})
	t.Run("errors before execution", func(t *testing.T) {
		two := block("bash", "true") + block("bash", "true")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": two, "block": 5}), 400, "block_out_of_range",
			"block index 5 out of range (have 2 blocks)")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": two, "block": -1}), 400, "block_out_of_range", "")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": "prose", "block": 0}), 400, "block_out_of_range",
			"have 0 blocks")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": two, "block": 1, "role": "indexer"}), 400,
			"role_lookup_unsupported", "")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": two, "block": 1.5}), 400, "invalid_json", "integer")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": two, "block": "0"}), 400, "invalid_json", "integer")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"block": 0}), 400, "invalid_messages", "")
		wantError(t, s.do(t, "POST", "/debug/run-block", `{"body":"x","block":0,`), 400, "invalid_json", "")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": two, "block": 0, "stdin": "a", "stdin_base64": "YQ=="}),
			400, "invalid_json", "not both")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": two, "block": 0, "stdin_base64": "%%"}),
			400, "invalid_json", "base64")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": "```bash\necho\n", "block": 0}), 422, "unclosed_fence", "")
		wantError(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": block("", "echo"), "block": 0}), 422, "unknown_language",
			"has no language")
	})
	t.Run("execution disabled", func(t *testing.T) {
		off := startDebugger(t, envOpts{allowed: []string{}})
		wantError(t, off.do(t, "POST", "/debug/run-block", map[string]any{"body": block("bash", "true"), "block": 0}), 422,
			"execution_disabled", "")
		wantError(t, off.do(t, "POST", "/debug/sessions", map[string]any{"body": block("bash", "true")}), 422, "execution_disabled", "")
	})
}

func TestBodyLimit(t *testing.T) {
	s := startDebugger(t, envOpts{maxBody: 4096})
	big := map[string]any{"body": block("bash", "echo "+strings.Repeat("x", 4096))}
	for _, path := range []string{"/debug/blocks", "/debug/run-block", "/debug/sessions"} {
		wantError(t, s.do(t, "POST", path, big), 413, "request_too_large", "4096")
	}
	wantStatus(t, s.do(t, "POST", "/debug/blocks", map[string]any{"body": block("bash", "echo small")}), 200)
}

func TestRunBlockSlots(t *testing.T) {
	pool := slots.New(1, 50*time.Millisecond)
	s := startDebugger(t, envOpts{slots: pool})
	release, _, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := s.do(t, "POST", "/debug/run-block", map[string]any{"body": block("bash", "true"), "block": 0})
	wantError(t, r, 429, "concurrency_limit", "")
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	release()
	wantStatus(t, s.do(t, "POST", "/debug/run-block", map[string]any{"body": block("bash", "true"), "block": 0}), 200)
}

// TestShutdownKillsRunningStep: stopping the listener closes every session, so a step that would run for a
// minute ends at once and Serve returns.
func TestShutdownKillsRunningStep(t *testing.T) {
	eng := newEngine(t, envOpts{})
	d, err := debugger.New(debugger.Config{Engine: eng, KillGrace: time.Second})
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
	s := &dbgServer{URL: "http://" + ln.Addr().String(), eng: eng, dbg: d}
	id := s.do(t, "POST", "/debug/sessions", map[string]any{"body": block("bash", "sleep 60")}).obj(t)["id"].(string)
	// Two steps race: the loser is refused at once, which shows the winner's block is running.
	stepped := make(chan reply, 2)
	for i := 0; i < 2; i++ {
		go func() { stepped <- s.do(t, "POST", "/debug/sessions/"+id+"/step", nil) }()
	}
	wantError(t, <-stepped, 409, "step_in_progress", "")
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(50 * time.Second):
		t.Fatal("Serve did not return")
	}
	wantError(t, <-stepped, 404, "session_not_found", "")
	if time.Since(start) > 40*time.Second {
		t.Fatal("the running step was not killed at shutdown")
	}
	if n := d.Sessions(); n != 0 {
		t.Fatalf("%d sessions after shutdown", n)
	}
	http.DefaultClient.CloseIdleConnections()
}
