package apierror

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/codellm/codellm/internal/contract"
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
