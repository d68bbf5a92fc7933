package workspace

import (
	"errors"

	"github.com/codellm/codellm/internal/wire"
)

// Code is one of the bridge protocol's workspace error codes (§9.9). No other value is ever produced, because
// the hub rejects any other errorCode.
type Code string

// The complete set of §9.9 codes.
const (
	CodeInvalidPath         Code = "INVALID_PATH"
	CodeInvalidRequest      Code = "INVALID_REQUEST"
	CodeReadLimitExceeded   Code = "READ_LIMIT_EXCEEDED"
	CodeWriteLimitExceeded  Code = "WRITE_LIMIT_EXCEEDED"
	CodeWriteDisabled       Code = "WRITE_DISABLED"
	CodeWriteUnavailable    Code = "WRITE_UNAVAILABLE"
	CodeEditConflict        Code = "EDIT_CONFLICT"
	CodeRegistrationInvalid Code = "REGISTRATION_INVALID"
	CodeExecutionAborted    Code = "EXECUTION_ABORTED"
	CodeListTimeout         Code = "LIST_TIMEOUT"
	CodeListUnavailable     Code = "LIST_UNAVAILABLE"
	CodeSearchTimeout       Code = "SEARCH_TIMEOUT"
	CodeSearchUnavailable   Code = "SEARCH_UNAVAILABLE"
	CodeCommandTimeout      Code = "COMMAND_TIMEOUT"
	CodeCommandUnavailable  Code = "COMMAND_UNAVAILABLE"
	CodeCommandDisabled     Code = "COMMAND_DISABLED"
)

// Error is every failure this package returns from Open and Do. Message is human text that never contains a
// host path; callers key on Code. MayHaveCommitted marks the failures §9 calls "may have committed": the
// workspace may have changed even though the operation failed (the worker must keep its quarantine marker).
type Error struct {
	Code             Code
	Message          string
	MayHaveCommitted bool
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Is makes the sentinels below comparable with errors.Is: two *Error match when their codes match.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels, one per code: errors.Is(err, ErrEditConflict).
var (
	ErrInvalidPath         = &Error{Code: CodeInvalidPath, Message: "invalid path"}
	ErrInvalidRequest      = &Error{Code: CodeInvalidRequest, Message: "invalid request"}
	ErrReadLimitExceeded   = &Error{Code: CodeReadLimitExceeded, Message: "read limit exceeded"}
	ErrWriteLimitExceeded  = &Error{Code: CodeWriteLimitExceeded, Message: "write limit exceeded"}
	ErrWriteDisabled       = &Error{Code: CodeWriteDisabled, Message: "workspace is not writable"}
	ErrWriteUnavailable    = &Error{Code: CodeWriteUnavailable, Message: "write unavailable"}
	ErrEditConflict        = &Error{Code: CodeEditConflict, Message: "edit conflict"}
	ErrRegistrationInvalid = &Error{Code: CodeRegistrationInvalid, Message: "workspace registration invalid"}
	ErrExecutionAborted    = &Error{Code: CodeExecutionAborted, Message: "execution aborted"}
	ErrListTimeout         = &Error{Code: CodeListTimeout, Message: "list timed out"}
	ErrListUnavailable     = &Error{Code: CodeListUnavailable, Message: "list unavailable"}
	ErrSearchTimeout       = &Error{Code: CodeSearchTimeout, Message: "search timed out"}
	ErrSearchUnavailable   = &Error{Code: CodeSearchUnavailable, Message: "search unavailable"}
	ErrCommandTimeout      = &Error{Code: CodeCommandTimeout, Message: "command timed out"}
	ErrCommandUnavailable  = &Error{Code: CodeCommandUnavailable, Message: "command unavailable"}
	ErrCommandDisabled     = &Error{Code: CodeCommandDisabled, Message: "commands are disabled"}
)

// maxErrorUnits is the reference's limit on the error text (JavaScript length, UTF-16 units).
const maxErrorUnits = 4096

func newErr(code Code, msg string) *Error {
	return &Error{Code: code, Message: wire.ClipUTF16(msg, maxErrorUnits)}
}

func committedErr(code Code, msg string) *Error {
	e := newErr(code, msg)
	e.MayHaveCommitted = true
	return e
}

// asError converts anything to *Error; unknown errors become fallback so that no raw OS error (which could
// carry a host path) ever leaves the package.
func asError(err error, fallback Code, msg string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return newErr(fallback, msg)
}
