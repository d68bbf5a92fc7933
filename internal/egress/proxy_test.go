package egress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/codellm/codellm/internal/sandbox"
	"go.uber.org/goleak"
	xproxy "golang.org/x/net/proxy"
)

func TestMain(m *testing.M) {
	sandbox.Main() // the end-to-end tests re-execute this binary as the sandbox helper
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"))
}

// mapResolver resolves test names to fixed addresses; anything else fails.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

type countMetrics struct {
	mu    sync.Mutex
	conns map[string]int
	bytes int64
}

func (c *countMetrics) Connection(decision, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conns[decision+"/"+reason]++
}

func (c *countMetrics) Bytes(_ string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bytes += n
}

func (c *countMetrics) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns[k]
}

var lo = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// startSession serves a session of a proxy with policy list on a loopback
// listener and returns its URL.
func startSession(t *testing.T, list []string, cfg Config) (*Session, string, *countMetrics) {
	t.Helper()
	pol, err := Parse(list)
	if err != nil {
		t.Fatal(err)
	}
	m := &countMetrics{conns: map[string]int{}}
	cfg.Policy, cfg.Metrics = pol, m
	if cfg.Resolver == nil {
		cfg.Resolver = mapResolver{"allowed.test": lo, "denied.test": lo, "private.test": {netip.MustParseAddr("10.9.8.7")},
			"meta.test": {netip.MustParseAddr("169.254.169.254")}, "mixed.test": {netip.MustParseAddr("10.9.8.7"), lo[0]}}
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Open("run-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close(); <-done })
	return s, "http://" + l.Addr().String(), m
}

func backends(t *testing.T) (plain, tls *httptest.Server) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
	})
	plain, tls = httptest.NewServer(h), httptest.NewTLSServer(h)
	t.Cleanup(func() { plain.Close(); tls.Close() })
	return plain, tls
}

func port(s *httptest.Server) string { return s.URL[strings.LastIndex(s.URL, ":")+1:] }

func get(t *testing.T, proxyURL, target string, ts *httptest.Server) (int, string) {
	t.Helper()
	tr := &http.Transport{Proxy: func(*http.Request) (*url.URL, error) { return url.Parse(proxyURL) }}
	if ts != nil && ts.TLS != nil {
		tr.TLSClientConfig = ts.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tr.TLSClientConfig.ServerName = "example.com" // httptest's certificate names example.com
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(target)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPAndConnect(t *testing.T) {
	plain, tls := backends(t)
	_, purl, m := startSession(t, []string{"allowed.test", "127.0.0.1"}, Config{})
	code, body := get(t, purl, "http://allowed.test:"+port(plain)+"/x", plain)
	if code != 200 || body != "hello allowed.test:"+port(plain)+" /x" {
		t.Fatalf("plain HTTP through the proxy: %d %q", code, body)
	}
	code, body = get(t, purl, "https://allowed.test:"+port(tls)+"/y", tls)
	if code != 200 || !strings.HasPrefix(body, "hello") {
		t.Fatalf("HTTPS through CONNECT: %d %q", code, body)
	}
	code, body = get(t, purl, "http://denied.test:"+port(plain)+"/", plain)
	if code != 403 || !strings.Contains(body, "denied.test is not on the network allow-list") {
		t.Fatalf("denied name: %d %q", code, body)
	}
	if _, body = get(t, purl, "https://denied.test:"+port(tls)+"/", tls); !strings.Contains(body, "Forbidden") {
		t.Fatalf("denied CONNECT: %q", body)
	}
	if m.get("allowed/allowed") != 2 || m.get("refused/not_allowed") != 2 {
		t.Fatalf("metrics: %v", m.conns)
	}
}

// TestPrivateAddresses is differential: the same names pass once an IP
// entry allows their addresses.
func TestPrivateAddresses(t *testing.T) {
	plain, _ := backends(t)
	names := []string{"allowed.test", "private.test", "meta.test", "mixed.test"}
	_, purl, m := startSession(t, names, Config{})
	for _, n := range []string{"allowed.test", "private.test", "meta.test"} {
		code, body := get(t, purl, "http://"+n+":"+port(plain)+"/", plain)
		if code != 403 || !strings.Contains(body, "resolves to") {
			t.Errorf("%s: %d %q, want a 403 naming the address", n, code, body)
		}
	}
	if m.get("refused/private_address") != 3 {
		t.Fatalf("metrics: %v", m.conns)
	}
	_, purl2, _ := startSession(t, append(names, "127.0.0.0/8"), Config{})
	if code, body := get(t, purl2, "http://allowed.test:"+port(plain)+"/", plain); code != 200 {
		t.Fatalf("loopback explicitly allowed: %d %q", code, body)
	}
	// mixed.test resolves to 10.9.8.7 and 127.0.0.1: only the allowed one is dialled.
	if code, body := get(t, purl2, "http://mixed.test:"+port(plain)+"/", plain); code != 200 {
		t.Fatalf("mixed: %d %q", code, body)
	}
}

func TestRawIP(t *testing.T) {
	plain, _ := backends(t)
	_, purl, m := startSession(t, []string{"allowed.test"}, Config{})
	if code, body := get(t, purl, plain.URL+"/", plain); code != 403 || !strings.Contains(body, "raw IP") {
		t.Fatalf("raw IP: %d %q", code, body)
	}
	if m.get("refused/raw_ip") != 1 {
		t.Fatalf("metrics: %v", m.conns)
	}
	_, purl2, _ := startSession(t, []string{"127.0.0.1"}, Config{})
	if code, body := get(t, purl2, plain.URL+"/", plain); code != 200 {
		t.Fatalf("raw IP on the list: %d %q", code, body)
	}
}

func TestSOCKS5(t *testing.T) {
	plain, _ := backends(t)
	_, purl, m := startSession(t, []string{"allowed.test", "127.0.0.1"}, Config{})
	d, err := xproxy.SOCKS5("tcp", strings.TrimPrefix(purl, "http://"), nil, xproxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DialContext: d.(xproxy.ContextDialer).DialContext}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	resp, err := c.Get("http://allowed.test:" + port(plain) + "/s")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello allowed.test:"+port(plain)+" /s" {
		t.Fatalf("SOCKS5 body %q", b)
	}
	if _, err := c.Get("http://denied.test:" + port(plain) + "/"); err == nil {
		t.Fatal("SOCKS5 to a denied name succeeded")
	}
	if m.get("refused/not_allowed") != 1 {
		t.Fatalf("metrics: %v", m.conns)
	}
}

func TestCaps(t *testing.T) {
	plain, _ := backends(t)
	_, purl, m := startSession(t, []string{"allowed.test", "127.0.0.1"}, Config{MaxConns: 2})
	for i := range 3 {
		code, _ := get(t, purl, "http://allowed.test:"+port(plain)+"/", plain)
		if want := map[bool]int{true: 200, false: 403}[i < 2]; code != want {
			t.Fatalf("connection %d: %d, want %d", i+1, code, want)
		}
	}
	if m.get("refused/conn_limit") != 1 {
		t.Fatalf("metrics: %v", m.conns)
	}
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(make([]byte, 1<<20))
	}))
	defer big.Close()
	_, purl2, m2 := startSession(t, []string{"allowed.test", "127.0.0.1"}, Config{MaxBytes: 64 << 10})
	tr := &http.Transport{Proxy: func(*http.Request) (*url.URL, error) { return url.Parse(purl2) }}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://allowed.test:" + port(big) + "/")
	if err == nil {
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n >= 1<<20 {
			t.Fatalf("byte cap of 64 KiB let %d bytes through", n)
		}
	}
	if m2.get("refused/byte_limit") == 0 {
		t.Fatalf("metrics: %v", m2.conns)
	}
}

func TestMalformed(t *testing.T) {
	_, purl, m := startSession(t, []string{"allowed.test"}, Config{})
	c, err := net.Dial("tcp", strings.TrimPrefix(purl, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /relative HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	b, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(b), "HTTP/1.1 400") {
		t.Fatalf("origin-form request: %q", b)
	}
	c2, err := net.Dial("tcp", strings.TrimPrefix(purl, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "GET http://allowed.test/ HTTP/1.1\r\nX: %s\r\n\r\n", strings.Repeat("a", 70<<10))
	b, _ = io.ReadAll(c2)
	if !strings.HasPrefix(string(b), "HTTP/1.1 400") {
		t.Fatalf("oversized head: %.80q", b)
	}
	if m.get("refused/bad_request") != 2 {
		t.Fatalf("metrics: %v", m.conns)
	}
}

func TestNarrowedSession(t *testing.T) {
	pol, _ := Parse([]string{"allowed.test", "*.wild.test"})
	p, err := New(Config{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Open("r", []string{"other.test"}); err == nil {
		t.Fatal("a wider per-run list was accepted")
	}
	s, err := p.Open("r", []string{"a.wild.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Policy().Entries(); len(got) != 1 || got[0] != "a.wild.test" {
		t.Fatalf("narrowed entries %q", got)
	}
}

func slogTo(b *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(&lockedWriter{w: b}, nil))
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
