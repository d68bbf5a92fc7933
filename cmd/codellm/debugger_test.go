package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/server"
)

// G27: serve refuses a non-loopback --debug-listen with the contract's message.
func TestServeRefusesPublicDebugListener(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9091", ":9091", "192.0.2.1:9091"} {
		var stderr bytes.Buffer
		code := run([]string{"serve", "--sandbox", "off", "--listen", "127.0.0.1:0", "--debug-listen", addr}, io.Discard, &stderr)
		want := `debug listener must bind loopback (127.0.0.1, [::1] or localhost), got "` + addr + `"`
		if code != 1 || !strings.Contains(stderr.String(), want) {
			t.Fatalf("%s: exit %d, stderr %q", addr, code, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if code := run([]string{"serve", "--sandbox", "off", "--debug-listen", "127.0.0.1:0", "--debug-max-sessions", "0"}, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "--debug-max-sessions must be at least 1") {
		t.Fatalf("max sessions 0: exit %d, %q", code, stderr.String())
	}
}

// startDebugger serves the step UI on the loopback address and stops when told to.
func TestStartDebugger(t *testing.T) {
	sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	programs, err := interp.Enable(interp.Builtin(), []string{"bash"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Listen: "127.0.0.1:0"}, engine.Config{Programs: programs,
		Pipeline: pipeline.Config{Sandbox: sb, WorkRoot: t.TempDir()}, Timeout: time.Minute}, sb)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	wait, err := startDebugger(context.Background(), &debugFlags{listen: "127.0.0.1:0", maxSessions: 2, sessionTTL: time.Minute}, "", srv, log)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`debug_listen=(127\.0\.0\.1:\d+)`).FindStringSubmatch(logs.String())
	if m == nil {
		wait()
		t.Fatalf("no listen address logged: %s", logs.String())
	}
	resp, err := http.Get("http://" + m[1] + "/")
	if err != nil {
		wait()
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "codellm step debugger") {
		t.Fatalf("UI: %d", resp.StatusCode)
	}
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the debugger did not stop")
	}
	if _, err := http.Get("http://" + m[1] + "/"); err == nil {
		t.Fatal("the debugger still answers after stopping")
	}
	// Without --debug-listen nothing starts.
	if off, err := startDebugger(context.Background(), registerDebugFlags(newFlagSet("x", "x", io.Discard)), "", srv, log); off != nil || err != nil {
		t.Fatalf("empty --debug-listen: started %v, err %v", off != nil, err)
	}
}
