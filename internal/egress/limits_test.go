package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// openConns holds n idle connections to the session's listener and returns them once the session has
// accepted what it will (each was accepted, or closed at once).
func openConns(t *testing.T, purl string, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for range n {
		c, err := net.Dial("tcp", strings.TrimPrefix(purl, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// closedByProxy reports whether the proxy closed c (EOF or reset) rather than leaving it open.
func closedByProxy(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// A block's idle connections to its egress proxy are bounded per run (issue 35 item 4: ~2 000 of them
// exhausted serve's descriptors, because only outbound dials were counted). Differential: without the
// cap every connection stays open in the server; with it those beyond are closed at once, counted, and
// the run can still use the proxy once it lets go of some.
func TestOpenConnectionCap(t *testing.T) {
	plain, _ := backends(t)
	s, purl, _ := startSession(t, []string{"allowed.test", "127.0.0.1"}, Config{MaxOpen: -1})
	openConns(t, purl, 40)
	for deadline := time.Now().Add(10 * time.Second); s.open() < 40; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("without a cap the proxy holds %d of 40 idle connections", s.open())
		}
	}

	s2, purl2, m := startSession(t, []string{"allowed.test", "127.0.0.1"}, Config{MaxOpen: 8})
	cs := openConns(t, purl2, 40)
	closed := 0
	for _, c := range cs[8:] {
		if closedByProxy(c) {
			closed++
		}
	}
	if closed != 32 || s2.open() > 8 {
		t.Fatalf("with a cap of 8: %d of the 32 extra connections closed, %d held open", closed, s2.open())
	}
	for deadline := time.Now().Add(10 * time.Second); m.get("refused/open_limit") != 32; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // counted just after the close the client saw
			t.Fatalf("open_limit refusals counted %d, want 32", m.get("refused/open_limit"))
		}
	}
	for _, c := range cs[:8] {
		c.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); s2.open() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still held after the block closed them", s2.open())
		}
	}
	if code, body := get(t, purl2, "http://allowed.test:"+port(plain)+"/", plain); code != 200 {
		t.Fatalf("the proxy after the run let go of its connections: %d %q", code, body)
	}
}

// open is how many client connections the session holds.
func (s *Session) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// An allowed upstream that sends an endless response header is cut off at 64 KiB with 502 (issue 35
// item 5: serve grew from 16 to 647 MiB reading it until the byte cap). Differential in what the proxy
// read: on the old code, the whole byte cap (here 32 MiB).
func TestEndlessResponseHeadIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = http.ReadRequest(bufio.NewReader(c))
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
				line := "X-Endless: " + strings.Repeat("a", 1000) + "\r\n"
				for {
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	_, p, _ := strings.Cut(ln.Addr().String(), ":")
	s, purl, m := startSession(t, []string{"allowed.test", "127.0.0.1"}, Config{MaxBytes: 32 << 20})
	code, body := get(t, purl, "http://allowed.test:"+p+"/", nil)
	if code != http.StatusBadGateway || !strings.Contains(body, "larger than 64 KiB") {
		t.Errorf("an endless response head: %d %q, want 502 naming the bound", code, body)
	}
	if n := s.bytes.Load(); n > 128<<10 {
		t.Errorf("the proxy read %d bytes of the response head, want at most 64 KiB and a buffer", n)
	}
	if m.get("refused/bad_response") != 1 {
		t.Errorf("metrics: %v", m.conns)
	}
}

// Forwarded request heads count against the run's byte cap (issue 35 item 13: 2.4 MB went through a
// 64 KiB cap, only bodies being counted). 40 requests with 40 KiB heads: the upstream sees at most the
// cap (and one request), and the refused ones get 403 naming the limit.
func TestRequestHeadsCountAgainstTheByteCap(t *testing.T) {
	var got atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int64(len(r.Method) + len(r.RequestURI) + 12)
		for k, vs := range r.Header {
			for _, v := range vs {
				n += int64(len(k) + len(v) + 4)
			}
		}
		got.Add(n)
		fmt.Fprint(w, "ok")
	}))
	defer up.Close()
	_, purl, _ := startSession(t, []string{"allowed.test", "127.0.0.1"}, Config{MaxBytes: 64 << 10})
	refused := 0
	for range 40 {
		c, err := net.Dial("tcp", strings.TrimPrefix(purl, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET http://allowed.test:%s/ HTTP/1.1\r\nHost: allowed.test\r\nX-Pad: %s\r\n\r\n", port(up), strings.Repeat("p", 40<<10))
		reply, _ := io.ReadAll(c)
		c.Close()
		if strings.HasPrefix(string(reply), "HTTP/1.1 403") && strings.Contains(string(reply), "byte limit") {
			refused++
		}
	}
	if n := got.Load(); n > 2*(64<<10) {
		t.Errorf("the upstream received %d bytes of request heads through a 64 KiB cap", n)
	}
	if refused < 38 {
		t.Errorf("%d of 40 requests refused at the byte cap, want all but the first", refused)
	}
}
