package hub

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/httpserve"
)

// listenHub serves h the way `codellm hub serve` does (listener limits, connection kinds) on a loopback
// port, with opts adjusted by mod; it returns the root URL.
func listenHub(t *testing.T, h *testHub, mod func(*httpserve.Options)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := h.serveOptions("", "")
	o.Grace = time.Second
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = httpserve.Serve(ctx, ln, h, o) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

// rawRequest opens a connection and sends a request head declaring a body of declared bytes, and the
// first byte of it; the body is never finished (a trickle). It returns the connection.
func rawRequest(t *testing.T, root, path string, hdr map[string]string, declared int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(root, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, declared)
	for k, v := range hdr {
		head += k + ": " + v + "\r\n"
	}
	if _, err := c.Write([]byte(head + "\r\n{")); err != nil {
		t.Fatal(err)
	}
	return c
}

// statusWithin reads a response status line from c within d (0 when none came).
func statusWithin(c net.Conn, d time.Duration) int {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Issue 35 item 11: a request without a valid credential whose body trickles is refused at once, on the
// client routes and the bridge routes alike, instead of after the body timeout (net/http drained the
// unread body before answering).
func TestUnauthenticatedTrickleRefusedAtOnce(t *testing.T) {
	h := newTestHub(t, nil)
	root := listenHub(t, h, nil)
	for _, c := range []struct {
		path     string
		hdr      map[string]string
		declared int
	}{
		{"/v1/exec", nil, 0},
		{"/v1/exec", map[string]string{"X-API-Key": "wrong-key"}, 0},
		{"/v1/chat/completions", map[string]string{"Authorization": "Bearer wrong-key"}, 0},
		{"/v1/bridge/workers/register", nil, 0},
		{"/v1/bridge/pairings", map[string]string{"Authorization": "Bearer wrong"}, 0},
		{"/v1/no-such-route", nil, 0},
		{"/v1/exec", nil, 1 << 30}, // a huge declared body: net/http's own early close
	} {
		if c.declared == 0 {
			c.declared = 100000
		}
		conn := rawRequest(t, root, c.path, c.hdr, c.declared)
		if st := statusWithin(conn, 3*time.Second); st == 0 || st == 200 {
			t.Errorf("%s %v: status %d within 3 s (the body timeout is 2 min)", c.path, c.hdr, st)
		}
		conn.Close()
	}
}

// Issue 35 item 11 and issue 36 item 3: connections that never authenticate cannot lock callers out (the
// oldest pending one is closed for a new one), and workers and clients have their own caps: a full worker
// cap refuses the next worker with 503 connection_limit while clients are still served. Without the
// connection kinds (the same total cap, nothing else) the idle sockets lock the client out.
func TestConnectionKinds(t *testing.T) {
	h := newTestHub(t, func(c *Config) {
		c.MaxPendingConnections, c.MaxWorkerConnections, c.MaxClientConnections = 4, 2, 2
	})
	root := listenHub(t, h, nil)
	flood := func(root string) func() {
		var socks []net.Conn
		for range 40 {
			c, err := net.Dial("tcp", strings.TrimPrefix(root, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			socks = append(socks, c)
		}
		time.Sleep(100 * time.Millisecond) // the server has accepted them
		return func() {
			for _, c := range socks {
				c.Close()
			}
		}
	}
	// client reports whether an authenticated client on a new connection got past the connection caps
	// (pinned to a worker that does not exist, it is then told 503 worker_unavailable at once).
	client := func(root string) (bool, string) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodPost, root+"/v1/exec", strings.NewReader(`{"lang":"py","code":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", apiKey)
		req.Header.Set("X-Codellm-Worker-Id", "none-such")
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return !strings.Contains(string(b), "connection_limit"), fmt.Sprintf("%d %s", resp.StatusCode, b)
	}

	stop := flood(root)
	if ok, got := client(root); !ok {
		t.Fatalf("authenticated client among 40 idle sockets: %s", got)
	}
	stop()

	// The attack without the protection: the same total cap, connections not told apart.
	plain := listenHub(t, newTestHub(t, nil), func(o *httpserve.Options) {
		o.Limits.MaxConns = h.conns.total()
		o.ConnContext, o.ConnState = nil, nil
	})
	stop = flood(plain)
	if ok, got := client(plain); ok {
		t.Fatalf("without connection kinds the client got in: %s", got)
	}
	stop()

	// Two workers fill the worker cap with their long polls; a third is refused, a client is not.
	w1, w2, w3 := newWorker(t, h, "cap-1"), newWorker(t, h, "cap-2"), newWorker(t, h, "cap-3")
	for _, w := range []*testWorker{w1, w2, w3} {
		w.pair(h)
		w.base = root + "/v1"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	polls := make(chan reply, 2)
	for _, w := range []*testWorker{w1, w2} {
		w.mustRegister()
		go func() { r, _ := w.lease(ctx, 5000); polls <- r }()
	}
	for deadline := time.Now().Add(5 * time.Second); h.conns.counts()[connWorker] < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("worker connections %v", h.conns.counts())
		}
	}
	w3.httpc = &http.Client{Transport: &http.Transport{}}
	r, _ := w3.register()
	if r.status != 503 || !strings.Contains(string(r.body), "connections") {
		t.Fatalf("third worker: %d %v %s", r.status, r.header, r.body)
	}
	if ok, got := client(root); !ok {
		t.Fatalf("client with the worker cap full: %s", got)
	}
	cancel()
	<-polls
	<-polls
}
