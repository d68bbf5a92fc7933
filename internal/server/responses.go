package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/codellm/codellm/internal/chat"
	"github.com/codellm/codellm/internal/openai"
)

// handleResponses serves POST /v1/responses through internal/responses (a draining server refuses new
// runs, as on the chat route).
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	rl.ID = openai.NewID()
	if s.draining.Load() {
		s.fail(w, rl, apiError(errShuttingDown, 0))
		return
	}
	s.responses.Create(w, r, &rl.Facts)
}

// onResponse adapts a route on a stored response (retrieve, delete, cancel, input_items).
func (s *Server) onResponse(h func(http.ResponseWriter, *http.Request, *chat.Facts)) func(http.ResponseWriter, *http.Request, *reqLog) {
	return func(w http.ResponseWriter, r *http.Request, rl *reqLog) { h(w, r, &rl.Facts) }
}

// scope names the caller for stored responses: a hash of its credential (never kept in clear).
func scope(r *http.Request) string {
	sum := sha256.Sum256([]byte(credential(r)))
	return hex.EncodeToString(sum[:16])
}
