package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/seal"
	"github.com/codellm/codellm/internal/sealform"
	"github.com/codellm/codellm/internal/server"
	"github.com/codellm/codellm/internal/testhelp"
)

// serveMetrics serves ts's metrics listener for addr on a free loopback port (the address decides the
// rules; the port is the test's) and returns its base URL.
func serveMetrics(t *testing.T, ts *testServer, addr string) string {
	t.Helper()
	ml, err := ts.srv.MetricsListener(addr)
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + testhelp.ServeLoopback(t, func(ctx context.Context, ln net.Listener) error {
		return ml.Serve(ctx, ln, httpserve.Options{Grace: time.Second})
	})
}

// trip2g's internal listener: on loopback /metrics needs no key (the main listener's does), pprof is
// served there and only there, and the probes answer.
func TestMetricsListenerLoopback(t *testing.T) {
	const key = "metrics-listener-key-0123456789abcdef"
	ts := startServer(t, options{cfg: func(c *server.Config) { c.APIKey = key }})
	base := serveMetrics(t, ts, server.DefaultMetricsListen)
	for path, want := range map[string]string{
		"/metrics":               "codellm_runs_in_flight",
		"/debug/pprof/":          "goroutine",
		"/debug/pprof/cmdline":   "",
		"/debug/pprof/goroutine": "",
		"/healthz":               "ok",
		"/livez":                 "alive",
		"/readyz":                `"ready":true`,
	} {
		if status, body := testhelp.GetBearer(t, base+path, ""); status != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s without a key: %d %.200q", path, status, body)
		}
	}
	if status, _ := testhelp.GetBearer(t, ts.URL+"/metrics", ""); status != 401 {
		t.Errorf("main listener /metrics without the key: %d, want 401", status)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
		if status, _ := testhelp.GetBearer(t, ts.URL+path, key); status != 404 {
			t.Errorf("main listener %s: %d, want 404 (pprof only on the metrics listener)", path, status)
		}
	}
	// DNS rebinding: a page whose name resolves to 127.0.0.1 still sends its own Host.
	req, _ := http.NewRequest(http.MethodGet, base+"/debug/pprof/cmdline", nil)
	req.Host = "attacker.example:18087"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("foreign Host: %d, want 403", resp.StatusCode)
	}
}

// Off loopback the listener needs the main listener's authentication, and is refused without it.
func TestMetricsListenerPublic(t *testing.T) {
	open := startServer(t, options{})
	if _, err := open.srv.MetricsListener("0.0.0.0:18087"); err == nil ||
		!strings.Contains(err.Error(), "refusing to serve the metrics listener on non-loopback address") {
		t.Fatalf("public address without authentication: %v", err)
	}
	if _, err := open.srv.MetricsListener("no-port"); err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Fatalf("bad address: %v", err)
	}
	const key = "metrics-listener-key-0123456789abcdef"
	keyed := startServer(t, options{cfg: func(c *server.Config) { c.APIKey = key }})
	base := serveMetrics(t, keyed, "0.0.0.0:18087")
	for _, path := range []string{"/metrics", "/debug/pprof/cmdline", "/readyz"} {
		if status, _ := testhelp.GetBearer(t, base+path, ""); status != 401 {
			t.Errorf("public %s without the key: %d, want 401", path, status)
		}
		if status, _ := testhelp.GetBearer(t, base+path, key); status != 200 {
			t.Errorf("public %s with the key: %d, want 200", path, status)
		}
	}
}

// The sealing form on the main listener: trip2g's path, behind the API key, JSON only, like every route.
func TestSealFormOnTheMainListener(t *testing.T) {
	const key = "seal-form-key-0123456789abcdefghijkl"
	t.Setenv("SEAL_KEY", "12345678901234567890123456789012")
	ts := startServer(t, options{cfg: func(c *server.Config) { c.APIKey = key }})
	if status, body := testhelp.GetBearer(t, ts.URL+sealform.DefaultPath, key); status != 200 || !strings.Contains(body, `name="value"`) {
		t.Fatalf("form: %d %.200q", status, body)
	}
	if status, _ := testhelp.GetBearer(t, ts.URL+sealform.DefaultPath, ""); status != 401 {
		t.Fatalf("form without the key: %d, want 401", status)
	}
	status, _, body := ts.post(t, sealform.DefaultPath, map[string]string{"value": "s3cret"})
	var out struct{ Sealed string }
	json.Unmarshal(body, &out)
	if got, err := seal.Open("12345678901234567890123456789012", out.Sealed); status != 200 || err != nil || got != "s3cret" {
		t.Fatalf("seal: %d %s (%q %v)", status, body, got, err)
	}
	status, _, body = ts.post(t, sealform.DefaultPath, "value=s3cret", "Content-Type", "application/x-www-form-urlencoded")
	wantError(t, status, body, 415, "unsupported_media_type", "")
	status, _, body = ts.post(t, sealform.DefaultPath, map[string]string{"env_key": "CODELLM_API_KEY", "value": "v"})
	wantError(t, status, body, 400, "invalid_request", "SEAL_KEY")
	if !strings.Contains(ts.logs.String(), `route=seal status=400 duration_ms=`) || !strings.Contains(ts.logs.String(), "code=invalid_request") {
		t.Fatalf("the request log lacks the seal route's error code:\n%s", ts.logs.String())
	}
}
