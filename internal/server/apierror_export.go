package server

import (
	"time"

	"github.com/codellm/codellm/internal/openai"
)

// APIError maps codellm's typed errors to the §11 envelope exactly as the chat endpoint does, so that
// the loopback debug surface (internal/debugger) answers the same codes for the same failures. Retry-After
// on a 429 is 5 seconds.
func APIError(err error) *openai.Error {
	return apiError(err, 5*time.Second)
}
