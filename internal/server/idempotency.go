package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/codellm/codellm/internal/idempotency"
	"github.com/codellm/codellm/internal/openai"
)

// idempotentRoutes are the routes that run code and so honour Idempotency-Key (README, contract).
var idempotentRoutes = map[string]bool{"chat": true, "responses": true, "runner.execute": true}

// setupIdempotency completes the configured guard with what only the server knows: the credential of
// a request, the run context that outlives a client that went away, the body limit and the metrics.
func (s *Server) setupIdempotency() {
	g := s.cfg.Idempotency
	if g == nil {
		return
	}
	g.Credential = credential
	g.Detach = s.detach
	if g.MaxBody <= 0 {
		g.MaxBody = s.cfg.MaxBodyBytes
	}
	g.OnEvent = func(e string) {
		s.metrics.Idempotency.WithLabelValues(e).Inc()
		if e == idempotency.EventReplayed || e == idempotency.EventAttached {
			s.metrics.Trip2g.ExecReplays.Inc() // trip2g's name: answered without running again
		}
	}
}

// idempotent puts h behind the guard when it is configured and the route runs code.
func (s *Server) idempotent(name string, h func(http.ResponseWriter, *http.Request, *reqLog)) func(http.ResponseWriter, *http.Request, *reqLog) {
	if s.cfg.Idempotency == nil || !idempotentRoutes[name] {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, rl *reqLog) {
		fail := func(w http.ResponseWriter, status int, code, msg string) {
			s.fail(w, rl, openai.NewError(status, code, "%s", msg))
		}
		if name == "runner.execute" {
			fail = func(w http.ResponseWriter, status int, code, msg string) {
				rl.Code = code
				openai.WriteJSON(w, status, map[string]string{"message": msg, "error": code})
			}
		}
		s.cfg.Idempotency.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, rl) }), fail).ServeHTTP(w, r)
	}
}

// detach gives a claimed run a context that the client going away does not cancel (its retry attaches
// to the run instead of starting a second one) but shutdown does.
func (s *Server) detach(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	base, _ := s.baseCtx.Load().(context.Context)
	if base == nil {
		return ctx, cancel
	}
	stop := context.AfterFunc(base, cancel)
	return ctx, func() { stop(); cancel() }
}

// credential names the caller for the idempotency scope: the client certificate under mTLS, else the
// Authorization header (the guard hashes it; it is never stored in clear).
func credential(r *http.Request) string {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		sum := sha256.Sum256(r.TLS.PeerCertificates[0].Raw)
		return "cert:" + hex.EncodeToString(sum[:])
	}
	return "auth:" + r.Header.Get("Authorization")
}
