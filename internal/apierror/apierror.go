// Package apierror maps codellm's typed errors (of the engine, the pipeline, the interpreter registry, the
// contract, sealing, slots) to the OpenAI error envelope, for every surface that answers in it: the
// server's chat routes and the loopback step debugger, so the two can never disagree about a failure.
package apierror

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/markdown"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/seal"
	"github.com/codellm/codellm/internal/slots"
)

// Map is the one place where codellm's typed errors become the OpenAI error envelope (§11). Anything
// it does not recognise is a codellm bug: 500 internal_error, with no detail that could leak paths.
func Map(err error, retryAfter time.Duration) *openai.Error {
	var (
		oe *openai.Error
		ue *markdown.UnclosedError
		tm *engine.TooManyBlocksError
		re *interp.ResolveError
		su *engine.SandboxUnavailableError
		pe *pipeline.Error
		bo *contract.BadOutputError
		mt *contract.MissingToolError
		se *seal.Error
		be *interp.BagEnvError
		de *engine.DeterminismError
	)
	switch {
	case errors.As(err, &oe):
		return oe
	case errors.As(err, &be):
		return openai.NewError(http.StatusBadRequest, "invalid_fleet_input", "%s", be.Error())
	case errors.As(err, &se):
		return openai.NewError(http.StatusUnprocessableEntity, "unseal_error", "%s", se.Error())
	case errors.As(err, &ue):
		return openai.NewError(http.StatusUnprocessableEntity, "unclosed_fence", "%s", ue.Error())
	case errors.As(err, &de) && de.Unavailable:
		return openai.NewError(http.StatusNotImplemented, "deterministic_unavailable", "%s", de.Error())
	case errors.As(err, &de):
		return openai.NewError(http.StatusBadRequest, "invalid_metadata", "%s", de.Error())
	case errors.As(err, &tm):
		return openai.NewError(http.StatusBadRequest, "too_many_blocks", "%s", tm.Error())
	case errors.Is(err, engine.ErrNoCodeBlocks):
		return openai.NewError(http.StatusUnprocessableEntity, "no_code_blocks", "%s", err.Error())
	case errors.As(err, &re):
		return openai.NewError(http.StatusUnprocessableEntity, re.Code, "%s", re.Message)
	case errors.As(err, &su):
		return openai.NewError(http.StatusUnprocessableEntity, "sandbox_unavailable", "%s", su.Error())
	case errors.As(err, &pe) && pe.Code == pipeline.CodeSandboxUnavailable && httpguard.DescriptorExhausted(pe.Cause):
		// Out of descriptors is the server's load, not a sandbox defect: 503 with Retry-After.
		e := openai.NewError(http.StatusServiceUnavailable, "descriptors_exhausted",
			"%sthe server is out of file descriptors (EMFILE/ENFILE), not a sandbox defect; retry later", blockPrefix(pe.Message))
		e.Header = http.Header{"Retry-After": []string{"5"}}
		return e
	case errors.As(err, &pe):
		if pe.Code == pipeline.CodeInvalid {
			// The engine built a pipeline the pipeline refuses: a codellm bug, not the caller's.
			return openai.NewError(http.StatusInternalServerError, "internal_error", "internal error")
		}
		return openai.NewError(http.StatusUnprocessableEntity, pe.Code, "%s", pe.Message)
	case errors.As(err, &bo):
		return openai.NewError(http.StatusUnprocessableEntity, "bad_output", "%s", bo.Error())
	case errors.As(err, &mt):
		return openai.NewError(http.StatusUnprocessableEntity, "missing_tool", "%s", mt.Error())
	case errors.Is(err, slots.ErrBusy):
		e := openai.NewError(http.StatusTooManyRequests, "concurrency_limit",
			"%s (retry later)", err.Error())
		secs := int(retryAfter / time.Second)
		if secs < 1 {
			secs = 1
		}
		e.Header = http.Header{"Retry-After": []string{strconv.Itoa(secs)}}
		return e
	case errors.Is(err, ErrShuttingDown):
		return openai.NewError(http.StatusServiceUnavailable, "shutting_down", "codellm is shutting down; retry on another instance")
	case errors.Is(err, context.Canceled):
		return openai.NewError(499, "cancelled", "the client went away")
	}
	return openai.NewError(http.StatusInternalServerError, "internal_error", "internal error")
}

// ErrShuttingDown: the service is draining (503 shutting_down).
var ErrShuttingDown = errors.New("shutting down")

// blockPrefix is the "block i/n: " prefix of a pipeline message ("" when it has none).
func blockPrefix(msg string) string {
	if i := strings.Index(msg, ": "); i > 0 && strings.HasPrefix(msg, "block ") {
		return msg[:i+2]
	}
	return ""
}
