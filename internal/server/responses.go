package server

import (
	"net/http"

	"github.com/codellm/codellm/internal/openai"
)

// handleResponses serves POST /v1/responses: the chat processing order on the request mapped by
// openai.DecodeResponsesRequest, answered as a Response object or its event stream.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	s.converse(w, r, rl, openai.DecodeResponsesRequest)
}
