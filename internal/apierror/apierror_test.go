package apierror

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/wire"
)

// The contract's errors are 422 with their own codes and text; an error Map does not know is a codellm bug
// and says nothing about itself (it may carry a path).
func TestMapContractAndUnknownErrors(t *testing.T) {
	_, bad := contract.Parse([]byte("oops"))
	missing := contract.RequireFinish([]string{"search"})
	for _, c := range []struct {
		err          error
		status       int
		code, detail string
	}{
		{bad, http.StatusUnprocessableEntity, "bad_output", bad.Error()},
		{fmt.Errorf("run 3: %w", missing), http.StatusUnprocessableEntity, "missing_tool", missing.Error()},
		{errors.New("open /var/lib/codellm/x: permission denied"), http.StatusInternalServerError, "internal_error", "internal error"},
	} {
		e := Map(c.err, 0)
		if e.Status != c.status || e.Code != c.code || e.Message != c.detail {
			t.Errorf("Map(%v) = %d %s %q, want %d %s %q", c.err, e.Status, e.Code, e.Message, c.status, c.code, c.detail)
		}
	}
}

// A deterministic request the sandbox cannot honour is refused 501 naming the missing piece; a malformed
// choice is the client's 400 — for the chat routes and the debugger alike.
func TestMapDeterminismErrors(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{&engine.DeterminismError{Unavailable: true, Missing: "libfaketime"}, http.StatusNotImplemented, wire.CodeDeterministicUnavailable},
		{&engine.DeterminismError{Msg: "the bag's now must be …"}, http.StatusBadRequest, wire.CodeInvalidMetadata},
	} {
		if e := Map(c.err, 0); e.Status != c.status || e.Code != c.code || e.Message != c.err.Error() {
			t.Errorf("Map(%v) = %d %s %q, want %d %s", c.err, e.Status, e.Code, e.Message, c.status, c.code)
		}
	}
}
