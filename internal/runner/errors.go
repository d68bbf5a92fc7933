package runner

import (
	"errors"
	"net/http"

	"github.com/codellm/codellm/internal/wire"
)

// Sentinels. Every error Execute, ResetSession and the handlers return is an *Error that matches exactly
// one of them with errors.Is, so in-process callers (the bridge worker's embedded supervisor) can branch
// without parsing messages.
var (
	ErrBadRequest       = errors.New("bad request")              // 400
	ErrUnknownRuntime   = errors.New("unknown runtime")          // 400, as Piston
	ErrSessionDirty     = errors.New("session workspace dirty")  // 409
	ErrTooLarge         = errors.New("request too large")        // 413
	ErrUnsupportedMedia = errors.New("unsupported media type")   // 415
	ErrBusy             = errors.New("busy")                     // 429 (slots or session count)
	ErrSandbox          = errors.New("sandbox execution failed") // 500
	ErrClosed           = errors.New("runner closed")            // 503
	ErrCanceled         = errors.New("execution canceled")       // 503 (caller went away before the run)
)

// Wire error codes (the "error" member of an error body), where the runner API defines one.
const (
	CodeSandboxFailed   = "sandbox_execution_failed"
	CodeTooManySessions = "too_many_sessions"
)

// Error is a failed request: the HTTP status and body the runner API answers with, plus the sentinel it
// matches and the underlying cause.
type Error struct {
	Status  int    // HTTP status
	Code    string // "error" member of the body; "" for Piston's plain {message}
	Message string // client-facing text
	Kind    error  // one of the sentinels above
	Err     error  // cause, may be nil
}

func (e *Error) Error() string { return e.Message }

// Unwrap exposes the sentinel and the cause to errors.Is / errors.As.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

func badRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: msg, Kind: ErrBadRequest}
}

func unknownRuntime(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Message: msg, Kind: ErrUnknownRuntime}
}

func dirty(msg string) *Error {
	return &Error{Status: http.StatusConflict, Code: wire.CodeSessionWorkspaceDirty, Message: msg, Kind: ErrSessionDirty}
}

func sandboxFailed(msg string, cause error) *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeSandboxFailed, Message: msg, Kind: ErrSandbox, Err: cause}
}
