package httpguard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serve runs h under l on a loopback port until the test ends.
func serve(t *testing.T, l Limits, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := l.Server(h, nil)
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(l.Listener(ln, true, nil)) }()
	t.Cleanup(func() { hs.Close(); <-done })
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func get(t *testing.T, c net.Conn) (*http.Response, error) {
	t.Helper()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// TestConnectionCap: idle connections used to exhaust the descriptors. With the cap, the connection past it
// is answered 503 connection_limit and closed, and a slot frees when a connection closes; with the cap off
// the same connection is served.
func TestConnectionCap(t *testing.T) {
	for _, capped := range []bool{false, true} {
		l := Limits{MaxConns: 2}
		if !capped {
			l.MaxConns = -1
		}
		addr := serve(t, l, okHandler)
		a, b := dial(t, addr), dial(t, addr)
		for _, c := range []net.Conn{a, b} {
			if resp, err := get(t, c); err != nil || resp.StatusCode != 200 {
				t.Fatalf("capped=%v: held connection: %v %v", capped, resp, err)
			}
		}
		third := dial(t, addr)
		resp, err := get(t, third)
		if !capped {
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("without the cap the third connection should be served: %v %v", resp, err)
			}
			continue
		}
		if err != nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("over the cap: %v %v, want 503 with Retry-After", resp, err)
		}
		a.Close()
		var served bool
		for i := 0; i < 200 && !served; i++ { // the server notices a's close asynchronously
			resp, err := get(t, dial(t, addr))
			served = err == nil && resp.StatusCode == 200
			if !served {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if !served {
			t.Fatal("a closed connection's slot was never released")
		}
	}
}

// TestBodyDeadline: a body that never finishes used to hold its handler forever. With the deadline the
// handler's read fails with a timeout; without it the read is still blocked when the client gives up.
// A handler that consumed its body keeps running (and its context alive) past the deadline.
func TestBodyDeadline(t *testing.T) {
	for _, limited := range []bool{false, true} {
		l := Limits{Body: 100 * time.Millisecond}
		if !limited {
			l.Body = -1
		}
		got := make(chan error, 1)
		addr := serve(t, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := io.ReadAll(r.Body)
			got <- err
		}))
		c := dial(t, addr)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"a\":")
		select {
		case err := <-got:
			var ne net.Error
			if !limited || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("limited=%v: body read ended with %v", limited, err)
			}
		case <-time.After(2 * time.Second):
			if limited {
				t.Fatal("the body deadline did not fire")
			}
			c.Close()
			<-got
		}
	}
	ctxErr := make(chan error, 1)
	addr := serve(t, Limits{Body: 50 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		time.Sleep(300 * time.Millisecond) // a run outlasting the body deadline
		ctxErr <- r.Context().Err()
		io.WriteString(w, "done")
	}))
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("long handler: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := <-ctxErr; err != nil {
		t.Fatalf("a long handler's context was cancelled by the body deadline: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestIdleTimeout: an idle keep-alive connection is closed by the server with the limit, and stays open
// without it.
func TestIdleTimeout(t *testing.T) {
	for _, limited := range []bool{false, true} {
		l := Limits{Idle: 100 * time.Millisecond}
		if !limited {
			l.Idle = -1
		}
		c := dial(t, serve(t, l, okHandler))
		if _, err := get(t, c); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		timedOut := errors.As(err, &ne) && ne.Timeout()
		if limited && (err != io.EOF) {
			t.Fatalf("idle connection with the limit: read %v, want EOF (closed by the server)", err)
		}
		if !limited && !timedOut {
			t.Fatalf("idle connection without the limit: read %v, want it still open", err)
		}
	}
}

// TestDescriptorExhausted recognises EMFILE and ENFILE however they are wrapped, and nothing else.
func TestDescriptorExhausted(t *testing.T) {
	wrapped := fmt.Errorf("sandbox: spec pipe: %w", &os.SyscallError{Syscall: "pipe2", Err: syscall.EMFILE})
	if !DescriptorExhausted(wrapped) || !DescriptorExhausted(&net.OpError{Op: "accept", Err: syscall.ENFILE}) {
		t.Fatal("EMFILE/ENFILE not recognised")
	}
	if DescriptorExhausted(syscall.ENOMEM) || DescriptorExhausted(context.Canceled) || DescriptorExhausted(nil) {
		t.Fatal("false positive")
	}
}
