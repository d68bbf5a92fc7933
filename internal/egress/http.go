package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// http serves HTTP proxy requests: CONNECT host:port (a tunnel, for
// HTTPS and anything else over TCP) or one absolute-form plain-HTTP
// request, forwarded with "Connection: close".
func (s *Session) http(c net.Conn, br *bufio.Reader, cr *capReader) {
	req, err := http.ReadRequest(br)
	if err != nil {
		d := dest{proto: "http"}
		s.record(d, refuse("bad_request", "malformed proxy request: %v", err))
		writeStatus(c, http.StatusBadRequest, "malformed proxy request")
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	cr.lift()
	if req.Method == http.MethodConnect {
		s.connect(c, br, req)
		return
	}
	s.forward(c, br, req)
}

func (s *Session) connect(c net.Conn, br *bufio.Reader, req *http.Request) {
	d := dest{proto: "connect"}
	host, port, err := splitHostPort(req.Host, 0)
	d.host, d.port = host, port
	if err != nil {
		s.record(d, refuse("bad_request", "CONNECT target %q: %v", req.Host, err))
		writeStatus(c, http.StatusBadRequest, "CONNECT needs host:port")
		return
	}
	up, err := s.dial(d)
	s.record(d, err)
	if err != nil {
		writeRefusal(c, err)
		return
	}
	defer up.Close()
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	s.relay(c, br, up, d)
}

// hopHeaders are removed before a request is forwarded (RFC 9110 §7.6.1
// plus the proxy's own).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Upgrade"}

func (s *Session) forward(c net.Conn, br *bufio.Reader, req *http.Request) {
	d := dest{proto: "http"}
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		s.record(d, refuse("bad_request", "not an absolute http:// URL: %q", req.RequestURI))
		writeStatus(c, http.StatusBadRequest, "a proxy request needs an absolute http:// URL (use CONNECT for https)")
		return
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	d.host, d.port = host, port
	if err != nil {
		s.record(d, refuse("bad_request", "URL host %q: %v", req.URL.Host, err))
		writeStatus(c, http.StatusBadRequest, "bad URL host")
		return
	}
	up, err := s.dial(d)
	s.record(d, err)
	if err != nil {
		writeRefusal(c, err)
		return
	}
	defer up.Close()
	s.exchange(c, up, req, d)
}

// exchange sends the client's request upstream and its response back, both
// heads bounded and every byte charged against the run's cap.
func (s *Session) exchange(c, up net.Conn, req *http.Request, d dest) {
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	// The destination is the checked URL host, never a client-chosen Host
	// header that a shared front end might route elsewhere.
	req.Host = req.URL.Host
	req.Close = true
	req.RequestURI = ""
	// Everything written upstream is charged, the request's head too: only
	// its body was, and 2.4 MB of heads went through a 64 KiB cap (issue 35
	// item 13).
	sent := &meteredWriter{s: s, w: up, d: d}
	recv := &meter{s: s, r: up, d: d}
	// The response's head is bounded as the request's is: an endless one
	// grew serve by 630 MiB before the byte cap ended it (issue 35 item 5).
	head := &capReader{r: recv, n: maxHeader}
	errc := make(chan error, 1)
	go func() {
		err := req.Write(sent)
		if err != nil {
			_ = up.Close() // no answer will come to half a request: end the read below
		}
		errc <- err
	}()
	resp, err := http.ReadResponse(bufio.NewReader(head), req)
	head.lift()
	collected := false
	if err != nil {
		// Why no response: the request hit the byte cap, or the upstream failed.
		_ = up.Close()
		if werr := <-errc; errors.Is(werr, errByteLimit) {
			err = werr
		}
		collected = true
	}
	switch {
	case errors.Is(err, errByteLimit) && !recv.over:
		writeStatus(c, http.StatusForbidden, "codellm egress: "+err.Error())
	case err == nil:
		resp.Close = true
		_ = resp.Write(c)
		_ = resp.Body.Close()
	case errors.Is(err, errHeaderTooLarge):
		s.record(d, refuse("bad_response", "the response head from %s is larger than 64 KiB", d.host))
		writeStatus(c, http.StatusBadGateway, "codellm egress: the response head from "+d.host+" is larger than 64 KiB")
	case !recv.over:
		writeStatus(c, http.StatusBadGateway, "no valid response from "+d.host)
	}
	_ = up.Close()
	if !collected {
		<-errc
	}
	s.finished(d, sent.n, recv.n)
}

// meter counts bytes read through it against the run's byte cap.
type meter struct {
	s    *Session
	r    io.Reader
	d    dest
	n    int64
	over bool
}

func (m *meter) Read(p []byte) (int, error) {
	if m.r == nil {
		return 0, io.EOF
	}
	n, err := m.r.Read(p)
	if n > 0 && !m.s.charge(int64(n), m.d) {
		m.over = true
		return 0, errByteLimit
	}
	m.n += int64(n)
	return n, err
}

// meteredWriter counts bytes before they are written against the run's
// byte cap; nothing past the cap is written.
type meteredWriter struct {
	s *Session
	w io.Writer
	d dest
	n int64
}

func (m *meteredWriter) Write(p []byte) (int, error) {
	if !m.s.charge(int64(len(p)), m.d) {
		return 0, errByteLimit
	}
	n, err := m.w.Write(p)
	m.n += int64(n)
	return n, err
}

// splitHostPort splits "host:port", "[v6]:port", or a bare host when def
// is non-zero.
func splitHostPort(hp string, def uint16) (string, uint16, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		if def == 0 || strings.Contains(strings.TrimPrefix(strings.TrimSuffix(hp, "]"), "["), "]") {
			return hp, 0, err
		}
		return trimBrackets(hp), def, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return h, 0, fmt.Errorf("bad port %q", p)
	}
	return h, uint16(n), nil
}

func writeStatus(c net.Conn, code int, msg string) {
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Proxy-Error: blocked-by-codellm\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n",
		code, http.StatusText(code), len(msg)+1, msg)
}

// writeRefusal answers 403 for a policy decision and 502 when an allowed
// destination could not be reached.
func writeRefusal(c net.Conn, err error) {
	code := http.StatusForbidden
	if r, ok := err.(*refusal); ok && (r.reason == "dial_failed" || r.reason == "resolve_failed") {
		code = http.StatusBadGateway
	}
	writeStatus(c, code, "codellm egress: "+err.Error())
}
