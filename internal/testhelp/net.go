package testhelp

import (
	"bytes"
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
