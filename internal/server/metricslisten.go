package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/openai"
)

// DefaultMetricsListen is trip2g's default for its internal listener (CODELLM_METRICS_ADDR): on by
// default, loopback, so that a deployment's scrape target and probes carry over unchanged.
const DefaultMetricsListen = "127.0.0.1:18087"

// MetricsListener is the internal listener trip2g's codellm serves beside its API (--metrics-listen, trip2g's
// --metrics-addr): GET /metrics without the API key the main listener's /metrics asks for, the Go profiler
// under /debug/pprof/ (served nowhere else), and the probes /healthz, /livez and /readyz.
//
// On a loopback address it is open, like trip2g's. pprof shows the process's command line and its
// internals, so a non-loopback address is served the way the main listener is — the same TLS and client
// certificates, the same API key on every route (Prometheus sends it with `authorization: credentials:`)
// — and is refused when the main listener has neither, unless --insecure-public says the operator accepts
// it (trip2g only warns).
type MetricsListener struct {
	Addr    string
	Handler http.Handler
	TLS     *tls.Config // nil: plain HTTP (always on loopback)
}

// MetricsListener checks addr and builds the internal listener's handler.
func (s *Server) MetricsListener(addr string) (*MetricsListener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("--metrics-listen %q: %v", addr, err)
	}
	ml := &MetricsListener{Addr: addr}
	rt := httpserve.NewRouter(func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, openai.NewError(http.StatusNotFound, "not_found", "no route for %s %s on the metrics listener", r.Method, r.URL.Path))
	}, func(w http.ResponseWriter, r *http.Request, allow []string) {
		e := openai.NewError(http.StatusMethodNotAllowed, "method_not_allowed", "method %s is not allowed on %s (allowed: %s)",
			r.Method, r.URL.Path, strings.Join(allow, ", "))
		e.Header = http.Header{"Allow": []string{strings.Join(allow, ", ")}}
		openai.WriteError(w, e)
	})
	rt.Handle("GET /metrics", s.metrics.Handler())
	rt.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { s.handleHealthz(w, r, nil) })
	rt.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "alive")
	})
	rt.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { s.handleReadyz(w, r, nil) })
	rt.HandleFunc("GET /debug/pprof/", pprof.Index) // the named profiles too: heap, goroutine, allocs, …
	rt.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	rt.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	rt.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	rt.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	ml.Handler = rt
	if !listen.IsLoopback(addr) {
		authenticated := s.cfg.APIKey != "" || s.cfg.ClientCA != ""
		if !authenticated && !s.cfg.InsecurePublic {
			return nil, fmt.Errorf("refusing to serve the metrics listener on non-loopback address %q without authentication: "+
				"it serves pprof and the process's command line; set --api-key or --client-ca (scrapes then authenticate "+
				"as clients of the main listener do), bind it to loopback, or set it empty to turn it off", addr)
		}
		tc, err := s.TLSConfig()
		if err != nil {
			return nil, err
		}
		ml.TLS = tc
		ml.Handler = httpserve.Auth(httpserve.BearerKey(s.cfg.APIKey), func(w http.ResponseWriter, r *http.Request) {
			e := openai.NewError(http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (send Authorization: Bearer <key>)")
			e.Header = http.Header{"Www-Authenticate": []string{"Bearer"}}
			openai.WriteError(w, e)
		}, ml.Handler)
		if !authenticated {
			s.log.Warn("serving the metrics listener unauthenticated on a public address (--insecure-public): anyone who can reach it reads pprof",
				"metrics_listen", addr)
		}
	}
	// Host and Origin rules as on every listener: a page the user visits cannot read pprof by rebinding
	// its name to 127.0.0.1.
	guard := httpguard.ForListener(addr, s.cfg.AllowedHosts, nil)
	ml.Handler = httpserve.Guard(guard, nil, func(w http.ResponseWriter, r *http.Request, ref *httpguard.Refusal) {
		openai.WriteError(w, openai.NewError(ref.Status, ref.Code, "%s", ref.Message))
	}, ml.Handler)
	return ml, nil
}

// Serve serves the listener on ln until ctx ends.
func (ml *MetricsListener) Serve(ctx context.Context, ln net.Listener, o httpserve.Options) error {
	o.TLS = ml.TLS
	return httpserve.Serve(ctx, ln, ml.Handler, o)
}
