// Package filerelay is the worker's file relay (`codellm worker relay`, and the worker's in-process relay
// under every runtime supervisor): the one door to the LibreChat Code API's egress gateway, through which
// an execution's by-reference inputs are read and its generated files stored. codellm's worker calls it
// on the sandbox's behalf; the standalone relay serves whatever sandboxes an operator points at it.
//
// The relay holds no credential a caller could misuse beyond its own run: it authenticates the caller
// by the worker-derived relay token (X-LibreChat-Code-Relay-Token, compared in constant time), forwards
// only the egress gateway's object routes, and forwards a request only with the execution's egress grant
// (X-CodeAPI-Egress-Grant), which the gateway checks against the execution's signed manifest. The relay
// token itself never leaves it. It bounds every transfer (bytes each way, a timeout, requests at once),
// never follows a redirect, and passes back only the response headers the sandbox needs — so a
// compromised sandbox can neither pivot to another upstream route nor learn what the gateway says in
// headers it did not ask for. Request and response shapes are those of the Code API's own relay
// (packages/code relay.ts), so either side may be upstream's.
package filerelay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/httpguard"
)

// Headers of the relay protocol.
const (
	TokenHeader        = "X-LibreChat-Code-Relay-Token"
	GrantHeader        = "X-CodeAPI-Egress-Grant"
	InputVersionHeader = "X-CodeAPI-Input-Version"
)

// Defaults, the Code API worker's.
const (
	DefaultMaxBytes      = 16 << 20
	DefaultTimeout       = 30 * time.Second
	DefaultMaxConcurrent = 8
	DefaultPort          = 3000
)

// Config is a relay's settings.
type Config struct {
	Upstream      string        // the egress gateway's base URL (https, or http to a local development host)
	Token         string        // the relay token sandboxes present
	MaxBytes      int64         // bytes of one request body and of one response body
	Timeout       time.Duration // one upstream exchange, end to end
	MaxConcurrent int           // upstream exchanges at once; more are answered 503
	// Client sends the upstream requests (nil: a client of its own). Its redirect policy is replaced:
	// the relay never follows one.
	Client *http.Client
}

// Relay is the relay's HTTP handler.
type Relay struct {
	cfg      Config
	upstream *url.URL
	token    [sha256.Size]byte
	client   *http.Client
	active   atomic.Int64
}

// localHosts may be reached over plain HTTP: a relay talking to a gateway on its own machine (upstream's
// development exception). Anything else must be HTTPS, since the grant travels in a header.
var localHosts = map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true,
	"host.docker.internal": true, "gateway.docker.internal": true}

// ValidateUpstream checks the egress gateway base URL as upstream does: http(s), no credentials, query
// or fragment, and HTTPS unless the host is a local development host.
func ValidateUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, fmt.Errorf("file relay upstream %q must be an HTTP URL without credentials, query, or fragment", s)
	}
	if u.Scheme != "https" && !localHosts[strings.ToLower(u.Hostname())] {
		return nil, fmt.Errorf("file relay upstream %q must use HTTPS unless it is a local development host", s)
	}
	return u, nil
}

// New checks cfg and returns the relay.
func New(cfg Config) (*Relay, error) {
	u, err := ValidateUpstream(cfg.Upstream)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.Token) == "" {
		return nil, errors.New("file relay token is required")
	}
	if cfg.MaxBytes <= 0 || cfg.Timeout <= 0 || cfg.MaxConcurrent <= 0 {
		return nil, errors.New("file relay max bytes, timeout and max concurrent requests must be positive")
	}
	c := &http.Client{}
	if cfg.Client != nil {
		cc := *cfg.Client
		c = &cc
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Relay{cfg: cfg, upstream: u, token: sha256.Sum256([]byte(cfg.Token)), client: c}, nil
}

var (
	segment    = `([^/]+)`
	objectPath = regexp.MustCompile(`^/sessions/` + segment + `/objects/` + segment + `$`)
	metaPath   = regexp.MustCompile(`^/sessions/` + segment + `/objects/` + segment + `/metadata$`)
	listPath   = regexp.MustCompile(`^/sessions/` + segment + `/objects$`)
)

// allowed reports whether method and URL are one of the egress gateway routes a sandbox may use: an
// object's bytes (GET, or PUT of a generated file), its metadata (GET), the session's normalized listing,
// and the input manifest (POST). Every path segment is opaque, but one that decodes to "." or ".." or
// holds a slash is refused: the gateway would resolve it to another route.
func allowed(method string, u *url.URL) bool {
	p := u.EscapedPath()
	var m []string
	switch {
	case u.RawQuery == "" && !u.ForceQuery && (method == http.MethodGet || method == http.MethodPut) && objectPath.MatchString(p):
		m = objectPath.FindStringSubmatch(p)
	case u.RawQuery == "" && !u.ForceQuery && method == http.MethodGet && metaPath.MatchString(p):
		m = metaPath.FindStringSubmatch(p)
	case method == http.MethodGet && listPath.MatchString(p) && u.RawQuery == "detail=normalized":
		m = listPath.FindStringSubmatch(p)
	case method == http.MethodPost && p == "/input-manifest" && u.RawQuery == "" && !u.ForceQuery:
		return true
	default:
		return false
	}
	for _, s := range m[1:] {
		d, err := url.PathUnescape(s)
		if err != nil || d == "." || d == ".." || strings.ContainsAny(d, `/\`) {
			return false
		}
	}
	return true
}

func (r *Relay) tokenOK(h http.Header) bool {
	v := h.Values(TokenHeader)
	if len(v) != 1 {
		return false
	}
	got := sha256.Sum256([]byte(v[0]))
	return subtle.ConstantTimeCompare(got[:], r.token[:]) == 1
}

// ServeHTTP answers one sandbox request. Refusals carry no body: 401 without the relay token, 404 for a
// route the relay does not forward, 403 without an egress grant, 503 (Retry-After: 1) at the concurrency
// bound, 413 for a body over the byte bound, 502 when the gateway fails, times out or answers more than
// the byte bound.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !r.tokenOK(req.Header) {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if req.Method == http.MethodGet && req.URL.Path == "/health" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"status":"ok"}`)
		return
	}
	if !allowed(req.Method, req.URL) {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	grant := req.Header.Get(GrantHeader)
	if grant == "" {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if r.active.Add(1) > int64(r.cfg.MaxConcurrent) {
		r.active.Add(-1)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer r.active.Add(-1)
	r.forward(w, req, grant)
}

var errTooLarge = errors.New("body exceeds the file relay's byte bound")

// readBounded reads at most max bytes of body, refusing a declared or actual length beyond it.
func readBounded(body io.Reader, declared, max int64) ([]byte, error) {
	if declared > max {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errTooLarge
	}
	return b, nil
}

// forward sends the admitted request to the gateway with only the headers the route needs and copies back
// the status, the bounded body and the allowed response headers.
func (r *Relay) forward(w http.ResponseWriter, req *http.Request, grant string) {
	var body []byte
	withBody := req.Method == http.MethodPut || req.Method == http.MethodPost
	if withBody {
		var err error
		if body, err = readBounded(req.Body, req.ContentLength, r.cfg.MaxBytes); err != nil {
			w.WriteHeader(statusFor(err, http.StatusRequestEntityTooLarge))
			return
		}
	}
	ctx, cancel := context.WithTimeout(req.Context(), r.cfg.Timeout)
	defer cancel()
	target := *r.upstream
	target.Path = strings.TrimSuffix(r.upstream.Path, "/") + req.URL.Path
	target.RawPath = strings.TrimSuffix(r.upstream.EscapedPath(), "/") + req.URL.EscapedPath()
	target.RawQuery = req.URL.RawQuery
	var rd io.Reader
	if withBody {
		rd = bytes.NewReader(body)
	}
	up, err := http.NewRequestWithContext(ctx, req.Method, target.String(), rd)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	up.Header.Set(GrantHeader, grant)
	copyHeaders(up.Header, req.Header, InputVersionHeader)
	if withBody {
		up.ContentLength = int64(len(body))
		copyHeaders(up.Header, req.Header, "Content-Type", "X-Original-Filename")
	}
	resp, err := r.client.Do(up)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rb, err := readBounded(resp.Body, resp.ContentLength, r.cfg.MaxBytes)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	copyHeaders(w.Header(), resp.Header, "Content-Type", "X-Read-Only", "Content-Disposition",
		"X-CodeAPI-Error-Code", "Retry-After", InputVersionHeader)
	w.Header().Set("Content-Length", strconv.Itoa(len(rb)))
	w.WriteHeader(resp.StatusCode)
	w.Write(rb)
}

func statusFor(err error, tooLarge int) int {
	if errors.Is(err, errTooLarge) {
		return tooLarge
	}
	return http.StatusBadGateway
}

func copyHeaders(dst, src http.Header, names ...string) {
	for _, n := range names {
		if v := src.Get(n); v != "" {
			dst.Set(n, v)
		}
	}
}

// Limits are the relay listener's bounds, upstream's: headers and whole requests within the timeout, idle
// connections kept at most 5 s. (Go's default header cap, 1 MiB, admits the 512 KiB grants upstream allows.)
func (r *Relay) Limits() httpguard.Limits {
	return httpguard.Limits{ReadHeader: r.cfg.Timeout, Body: r.cfg.Timeout, Idle: min(r.cfg.Timeout, 5*time.Second)}
}
