package bridge

import (
	"encoding/json"
	"errors"
	"net/http"
)

// Code is a machine-readable bridge error code (spec §3.10). Callers key on
// the code and the HTTP status, never on the human text.
type Code string

// The complete set of bridge error codes.
const (
	CodePublicKeyInvalid     Code = "PUBLIC_KEY_INVALID"
	CodePairingInvalid       Code = "PAIRING_INVALID"
	CodeCredentialInvalid    Code = "CREDENTIAL_INVALID"
	CodeProofInvalid         Code = "PROOF_INVALID"
	CodeProofReplayed        Code = "PROOF_REPLAYED"
	CodeWorkerUnauthorized   Code = "WORKER_UNAUTHORIZED"
	CodeAssignmentNotFound   Code = "ASSIGNMENT_NOT_FOUND"
	CodeWorkerFenced         Code = "WORKER_FENCED"
	CodeWorkerQuarantined    Code = "WORKER_QUARANTINED"
	CodeWorkspaceQuarantined Code = "WORKSPACE_QUARANTINED"
	CodeAssignmentFenced     Code = "ASSIGNMENT_FENCED"
	CodeAssignmentExpired    Code = "ASSIGNMENT_EXPIRED"
	CodeWorkerMismatch       Code = "WORKER_MISMATCH"
	CodeWorkerOffline        Code = "WORKER_OFFLINE"
	CodeAssignmentInvalid    Code = "ASSIGNMENT_INVALID"
	CodeResultInvalid        Code = "RESULT_INVALID"
	CodeBodyTooLarge         Code = "BODY_TOO_LARGE"
	CodeWorkerBusy           Code = "WORKER_BUSY"
	// CodeStoreUnavailable: the hub cannot reach its store; retry after
	// Retry-After (hub store outages, not in the reference).
	CodeStoreUnavailable Code = "STORE_UNAVAILABLE"
	// CodeStoreReset: the hub's store lost its state (credentials
	// included); the worker must be paired again.
	CodeStoreReset Code = "STORE_RESET"
)

// HTTPStatus is the status that carries c on the wire.
func (c Code) HTTPStatus() int {
	switch c {
	case CodePublicKeyInvalid:
		return http.StatusBadRequest
	case CodePairingInvalid, CodeCredentialInvalid, CodeProofInvalid, CodeProofReplayed:
		return http.StatusUnauthorized
	case CodeWorkerUnauthorized:
		return http.StatusForbidden
	case CodeAssignmentNotFound:
		return http.StatusNotFound
	case CodeBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeWorkerBusy, CodeStoreUnavailable:
		return http.StatusServiceUnavailable
	case CodeStoreReset:
		return http.StatusUnauthorized
	case "":
		return http.StatusBadRequest
	default:
		// Rule of §3.10: every other store code is a conflict.
		return http.StatusConflict
	}
}

// Error is a bridge error: an HTTP status, an optional code and a message.
// It is both what the hub writes and what a worker decodes from a reply.
type Error struct {
	Status  int
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Code != "" {
		return "bridge: " + string(e.Code) + ": " + e.Message
	}
	return "bridge: " + e.Message
}

// Is matches errors by code when both carry one, else by status and message,
// so errors.Is(err, ErrWorkerFenced) works for decoded replies too.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	if e.Code != "" || t.Code != "" {
		return e.Code == t.Code
	}
	return e.Status == t.Status && e.Message == t.Message
}

// NewError builds an Error whose status follows from the code.
func NewError(code Code, msg string) *Error {
	return &Error{Status: code.HTTPStatus(), Code: code, Message: msg}
}

// Errorf builds a code-less error with an explicit status (validation 400,
// bare 401/403/409/503 of §3.10).
func Errorf(status int, msg string) *Error {
	return &Error{Status: status, Message: msg}
}

// Sentinels, one per code, with the reference's wording.
var (
	ErrPublicKeyInvalid     = NewError(CodePublicKeyInvalid, "Invalid bridge worker public key")
	ErrPairingInvalid       = NewError(CodePairingInvalid, "Invalid or expired bridge pairing code")
	ErrCredentialInvalid    = NewError(CodeCredentialInvalid, "Invalid bridge worker credential")
	ErrProofInvalid         = NewError(CodeProofInvalid, "Invalid bridge request proof")
	ErrProofReplayed        = NewError(CodeProofReplayed, "Bridge request proof was replayed")
	ErrWorkerUnauthorized   = NewError(CodeWorkerUnauthorized, "Bridge worker is not authorized")
	ErrAssignmentNotFound   = NewError(CodeAssignmentNotFound, "Bridge assignment not found")
	ErrWorkerFenced         = NewError(CodeWorkerFenced, "Bridge worker incarnation is fenced")
	ErrWorkerQuarantined    = NewError(CodeWorkerQuarantined, "Bridge worker incarnation is quarantined")
	ErrWorkspaceQuarantined = NewError(CodeWorkspaceQuarantined, "Bridge workspace is quarantined")
	ErrAssignmentFenced     = NewError(CodeAssignmentFenced, "Bridge assignment is fenced")
	ErrAssignmentExpired    = NewError(CodeAssignmentExpired, "Bridge assignment expired")
	ErrWorkerMismatch       = NewError(CodeWorkerMismatch, "Bridge worker does not match the assignment")
	ErrWorkerOffline        = NewError(CodeWorkerOffline, "Bridge worker is offline")
	ErrAssignmentInvalid    = NewError(CodeAssignmentInvalid, "Invalid bridge assignment")
	ErrResultInvalid        = NewError(CodeResultInvalid, "Invalid bridge assignment result")
	ErrBodyTooLarge         = NewError(CodeBodyTooLarge, "Bridge request body is too large")
	ErrWorkerBusy           = NewError(CodeWorkerBusy, "Bridge worker is busy")
	ErrStoreUnavailable     = NewError(CodeStoreUnavailable, "Bridge hub store is unavailable")
	ErrStoreReset           = NewError(CodeStoreReset, "The hub's store was reset: pair this worker again")
)

// Envelope is the wire error body: {"error":"…","code":"…"}.
type Envelope struct {
	Error string `json:"error"`
	Code  Code   `json:"code,omitempty"`
}

// EnvelopeBytes renders e as its canonical wire body.
func (e *Error) EnvelopeBytes() []byte {
	b, _ := Marshal(Envelope{Error: e.Message, Code: e.Code})
	return b
}

// WriteError writes err as a bridge error reply. Non-bridge errors become a
// code-less 500 without leaking their text.
func WriteError(w http.ResponseWriter, err error) {
	var be *Error
	if !errors.As(err, &be) {
		be = Errorf(http.StatusInternalServerError, "Internal bridge error")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(be.Status)
	_, _ = w.Write(be.EnvelopeBytes())
}

// DecodeError turns a non-2xx reply into an *Error. A body that is not an
// envelope still yields an Error carrying the status.
func DecodeError(status int, body []byte) *Error {
	var env Envelope
	e := &Error{Status: status, Message: http.StatusText(status)}
	if json.Unmarshal(body, &env) == nil {
		if env.Error != "" {
			e.Message = env.Error
		}
		e.Code = env.Code
	}
	return e
}
