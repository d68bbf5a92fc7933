package worker

import (
	"crypto/rand"
	"errors"
	"net/http"

	"github.com/codellm/codellm/internal/bridge"
)

// Sentinels for the ways the worker loop ends; ExitCode maps them to §12's exit codes.
var (
	// ErrConfig: the configuration or a local resource is unusable (exit 1).
	ErrConfig = errors.New("configuration error")
	// ErrAuth: the hub refused the worker's authentication (401, 403) or a rotation could not be
	// persisted or was malformed (exit 3).
	ErrAuth = errors.New("authentication failed")
	// ErrFenced: another incarnation owns the worker (exit 4).
	ErrFenced = errors.New("fenced by another incarnation")
	// ErrQuarantined: the hub or a local marker says local state may be inconsistent (exit 5).
	ErrQuarantined = errors.New("quarantined")
	// ErrProtocol: a reply broke the protocol (retried with backoff).
	ErrProtocol = errors.New("protocol error")
	// ErrStoreReset: the hub's store lost its state, this worker's
	// credential with it (an authentication failure: exit 3).
	ErrStoreReset error = storeResetError{}
)

type storeResetError struct{}

func (storeResetError) Error() string { return "the hub's store was reset: pair this worker again" }
func (storeResetError) Unwrap() error { return ErrAuth }

// Exit codes of `codellm worker run` (§12).
const (
	ExitOK          = 0
	ExitError       = 1
	ExitUsage       = 2
	ExitAuth        = 3
	ExitFenced      = 4
	ExitQuarantined = 5
)

// ExitCode maps the error Run returned to the process exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrQuarantined):
		return ExitQuarantined
	case errors.Is(err, ErrFenced):
		return ExitFenced
	case errors.Is(err, ErrAuth):
		return ExitAuth
	}
	return ExitError
}

// TransportError is a request that got no HTTP reply (connection refused, timeout, reset).
type TransportError struct{ Err error }

func (e *TransportError) Error() string { return "transport: " + e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

// transient reports whether a hub failure is worth retrying: transport errors, malformed replies, 5xx,
// 408 and 429 (§6.5).
func transient(err error) bool {
	var te *TransportError
	if errors.As(err, &te) || errors.Is(err, ErrProtocol) {
		return true
	}
	var be *bridge.Error
	if errors.As(err, &be) {
		return be.Status >= 500 || be.Status == http.StatusRequestTimeout || be.Status == http.StatusTooManyRequests
	}
	return false
}

// fatal turns a hub reply that must end the worker into its sentinel (§6.5), or returns nil.
func fatal(err error) error {
	var be *bridge.Error
	if !errors.As(err, &be) {
		if errors.Is(err, ErrAuth) || errors.Is(err, ErrFenced) || errors.Is(err, ErrQuarantined) || errors.Is(err, ErrConfig) {
			return err
		}
		return nil
	}
	switch {
	case be.Code == bridge.CodeStoreReset:
		return ErrStoreReset
	case be.Status == http.StatusUnauthorized || be.Status == http.StatusForbidden:
		return errors.Join(ErrAuth, err)
	case be.Code == bridge.CodeWorkerFenced:
		return errors.Join(ErrFenced, err)
	case be.Code == bridge.CodeWorkerQuarantined:
		return errors.Join(ErrQuarantined, err)
	}
	return nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("worker: crypto/rand failed: " + err.Error())
	}
	return b
}
