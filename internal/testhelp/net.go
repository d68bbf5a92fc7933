package testhelp

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
)

// AcceptAndClose accepts every connection on ln and closes it at once, until ln is closed at the test's
// end: a listener that is there (a connect succeeds) but serves nothing.
func AcceptAndClose(t testing.TB, ln net.Listener) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// PostJSON posts body with Content-Type application/json and the extra headers hdr, and returns the
// response's status, headers and whole body. A failed round trip fails the test.
func PostJSON(t testing.TB, url string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return roundTrip(t, req)
}

// GetBearer GETs url, with "Authorization: Bearer <key>" when key is not empty, and returns the status and
// the whole body. A failed round trip fails the test.
func GetBearer(t testing.TB, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	status, _, body := roundTrip(t, req)
	return status, string(body)
}

func roundTrip(t testing.TB, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, raw.Bytes()
}

// ServeLoopback runs serve on a fresh loopback listener until the test ends, then cancels its context
// and waits for it (a serve error fails the test), and returns the listener's address.
func ServeLoopback(t testing.TB, serve func(ctx context.Context, ln net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serving %s: %v", ln.Addr(), err)
		}
	})
	return ln.Addr().String()
}
