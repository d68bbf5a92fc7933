package server

import (
	"net/http"
	"strings"

	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/sandbox"
)

// trip2g's metric names (metrics.Trip2g) for what the listener sees: requests of the endpoints trip2g
// instrumented, their number in flight, authentication decisions, and the execution posture.

// trip2gEndpoint is a route's codellm_requests_total{endpoint}, "" for a route trip2g did not count.
func trip2gEndpoint(route, method string) string {
	switch route {
	case "chat":
		return "chat_completions"
	case "responses":
		return "responses"
	case "seal":
		if method == http.MethodPost {
			return "seal"
		}
		return "seal_form"
	}
	return ""
}

// inFlight counts the requests of trip2g's endpoints being served (codellm_requests_in_flight).
func (s *Server) inFlight(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if trip2gEndpoint(route, r.Method) == "" {
			h.ServeHTTP(w, r)
			return
		}
		g := s.metrics.Trip2g.RequestsInFlight
		g.Inc()
		defer g.Dec()
		h.ServeHTTP(w, r)
	})
}

// authCheck is the bearer-key check of the authenticated routes, counting each decision
// (codellm_auth_total): lane apikey when a key is configured; lane client_cert when only mutual TLS is,
// where every request that arrives has passed (the handshake refuses the others, unseen here).
func (s *Server) authCheck() func(*http.Request) bool {
	check := httpserve.BearerKey(s.cfg.APIKey)
	return func(r *http.Request) bool {
		ok := check(r)
		lane := ""
		switch {
		case s.cfg.APIKey != "":
			lane = "apikey"
		case s.cfg.ClientCA != "":
			lane = "client_cert"
		}
		if lane != "" {
			result := "allowed"
			if !ok {
				result = "denied"
			}
			s.metrics.Trip2g.Auth.WithLabelValues(lane, result).Inc()
		}
		return ok
	}
}

// publishPosture sets codellm_config_info and returns the besteffort mode's missing mechanisms ("" when
// none, or in another mode) for codellm_sandbox_fallbacks_total.
func (s *Server) publishPosture() string {
	programs := ""
	if s.programs != nil {
		programs = strings.Join(s.programs.Names(), ",")
	}
	if s.sb == nil {
		s.metrics.Trip2g.SetConfig("", s.cfg.Network, programs)
		return ""
	}
	s.metrics.Trip2g.SetConfig(string(s.sb.Mode()), s.cfg.Network, programs)
	if s.sb.Mode() != sandbox.ModeBestEffort {
		return ""
	}
	return strings.Join(s.sb.Report().Missing, ",")
}
