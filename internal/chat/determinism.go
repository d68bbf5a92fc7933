package chat

import (
	"errors"
	"net/http"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/wire"
)

// determinismError maps engine.Determinism's refusal: a malformed choice is the client's (400
// invalid_metadata); a server that cannot honour the mode fully refuses with 501
// deterministic_unavailable, naming the missing piece, rather than run a half-reproducible block.
func determinismError(err error) *openai.Error {
	var de *engine.DeterminismError
	if errors.As(err, &de) && de.Unavailable {
		return openai.NewError(http.StatusNotImplemented, wire.CodeDeterministicUnavailable, "%s", de.Error())
	}
	return openai.NewError(http.StatusBadRequest, wire.CodeInvalidMetadata, "%s", err.Error())
}
