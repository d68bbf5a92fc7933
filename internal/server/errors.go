package server

import (
	"time"

	"github.com/codellm/codellm/internal/apierror"
	"github.com/codellm/codellm/internal/openai"
)

// apiError maps an error to the OpenAI envelope (package apierror is the one table).
func apiError(err error, retryAfter time.Duration) *openai.Error {
	return apierror.Map(err, retryAfter)
}

var errShuttingDown = apierror.ErrShuttingDown
