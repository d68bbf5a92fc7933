package server

import (
	"errors"
	"net/http"

	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/openai"
)

// handleResponses serves POST /v1/responses: the chat processing order on the request mapped by
// openai.DecodeResponsesRequest, answered as a Response object or its event stream.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	s.converse(w, r, rl, openai.DecodeResponsesRequest)
}

// replyResponses writes the calls as function_call output items.
func (s *Server) replyResponses(w http.ResponseWriter, rl *reqLog, req *openai.ChatRequest, created int64, calls []contract.ToolCall) {
	id := openai.ResponseID(rl.id)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		w.Write(openai.Response(id, created, req, calls))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(openai.ResponseStream(id, created, req, calls)); err != nil {
		s.log.Debug("stream write failed", "id", rl.id, "err", err)
		return
	}
	if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.log.Debug("stream flush failed", "id", rl.id, "err", err)
	}
}
