// Package httpguard is the request hygiene and connection limits every codellm HTTP listener shares (the
// main service, the step debugger and the bridge hub), so that there is one implementation of each rule:
//
//   - Host: a loopback listener answers only requests whose Host is "localhost" or a loopback IP literal
//     (plus operator-configured names), which defeats DNS rebinding — a page whose name re-resolves to
//     127.0.0.1 still sends its own name as Host.
//   - Origin: a request carrying a browser Origin other than the listener's own (or an operator-configured
//     one) is refused, so a page the user visits cannot drive the service even through a CORS-simple
//     request.
//   - Content type: POST/PUT/PATCH bodies must be application/json. Cross-site forms and fetch() without a
//     preflight can only send text/plain, form or multipart bodies, and preflights are never granted.
//   - Listener limits: header, body and idle timeouts, a connection cap, and descriptor exhaustion logged
//     and answered as what it is (limits.go).
//
// The rules are syntactic and never resolve names (a resolver could say anything).
package httpguard

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/codellm/codellm/internal/listen"
)

// Refusal is why a request was refused before any route ran: the HTTP status, a stable error code and a
// precise message. Each listener renders it in its own error envelope.
type Refusal struct {
	Status  int
	Code    string
	Message string
}

// Policy is one listener's request rules.
type Policy struct {
	// CheckHost refuses a Host that is neither loopback nor in AllowedHosts. Set it for loopback listeners
	// (and for public ones when the operator lists their names).
	CheckHost bool
	// AllowedHosts are extra Host names (without port, case-insensitive) the operator serves under.
	AllowedHosts []string
	// AllowedOrigins are extra browser origins ("https://app.example") that may call the listener; the
	// listener's own origin (Origin host equal to the request Host) is always allowed.
	AllowedOrigins []string
}

// Check applies the Host and Origin rules (in that order). It returns nil when the request may proceed.
func (p *Policy) Check(r *http.Request) *Refusal {
	if p.CheckHost && !p.HostAllowed(r.Host) {
		return &Refusal{http.StatusForbidden, "bad_host", fmt.Sprintf(
			"Host %q is not localhost, a loopback IP literal or an allowed host name (refused to defeat DNS rebinding)", r.Host)}
	}
	if o := r.Header.Values("Origin"); len(o) > 0 && !p.OriginAllowed(o[0], r.Host) {
		return &Refusal{http.StatusForbidden, "bad_origin", fmt.Sprintf(
			"Origin %q is not this server's origin or an allowed origin (cross-site requests are refused)", o[0])}
	}
	return nil
}

// HostAllowed reports whether hostport (a Host header, with or without port) names a loopback host or one
// of the allowed host names.
func (p *Policy) HostAllowed(hostport string) bool {
	host := hostOnly(hostport)
	if host == "" {
		return false
	}
	if listen.IsLoopbackHost(host) {
		return true
	}
	for _, h := range p.AllowedHosts {
		if strings.EqualFold(strings.TrimSuffix(h, "."), strings.TrimSuffix(host, ".")) {
			return true
		}
	}
	return false
}

// OriginAllowed reports whether a browser Origin may call a listener reached under reqHost. "null" (a
// sandboxed frame, a file: page) and anything unparsable are refused.
func (p *Policy) OriginAllowed(origin, reqHost string) bool {
	origin = strings.TrimSpace(origin)
	for _, o := range p.AllowedOrigins {
		if strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" {
		return false
	}
	return sameHostPort(u, reqHost)
}

// sameHostPort compares an origin's host:port (default port by scheme) with a Host header.
func sameHostPort(u *url.URL, reqHost string) bool {
	defPort := "80"
	if u.Scheme == "https" {
		defPort = "443"
	}
	oh, op := splitDefault(u.Host, defPort)
	rh, rp := splitDefault(reqHost, defPort)
	return oh != "" && strings.EqualFold(oh, rh) && op == rp
}

func splitDefault(hostport, defPort string) (string, string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return strings.Trim(h, "[]"), p
	}
	return strings.Trim(hostport, "[]"), defPort
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// CheckContentType refuses a POST, PUT or PATCH with a body whose Content-Type is not application/json (415
// unsupported_media_type). Run it after routing, so that unknown routes stay 404 and wrong methods 405.
func CheckContentType(r *http.Request) *Refusal {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return nil
	}
	if JSONContentType(r.Header.Get("Content-Type")) {
		return nil
	}
	// A POST without a body (POST /v1/responses/{id}/cancel as the SDKs send it) carries nothing to check;
	// a browser's cross-site one still meets the Origin rule.
	if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
		return nil
	}
	return &Refusal{http.StatusUnsupportedMediaType, "unsupported_media_type", fmt.Sprintf(
		"%s needs Content-Type: application/json (got %q)", r.Method, r.Header.Get("Content-Type"))}
}

// JSONContentType reports whether ct is application/json (parameters such as charset allowed).
func JSONContentType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// ForListener is the policy of a listener on addr: the Host check is on for loopback addresses and
// whenever the operator listed host names.
func ForListener(addr string, allowedHosts, allowedOrigins []string) *Policy {
	return &Policy{
		CheckHost:      listen.IsLoopback(addr) || len(allowedHosts) > 0,
		AllowedHosts:   allowedHosts,
		AllowedOrigins: allowedOrigins,
	}
}
