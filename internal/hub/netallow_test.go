package hub

import (
	"errors"
	"net/http"
	"testing"

	"github.com/codellm/codellm/internal/wire"
)

// A worker relays its refusal of a request's network_allow as text; the hub answers it 400. Only the
// refusal itself counts: a failure whose text merely quotes the field (a program's output, another
// field's refusal) stays a 502.
func TestRelayedNetworkAllowRefusal(t *testing.T) {
	refusal := wire.RefusedNetworkAllow(errors.New(`invalid network allow-list: "example.com" is not on the operator's allow-list`)).Error()
	for msg, want := range map[string]int{
		refusal: http.StatusBadRequest,
		`Sandbox rejected execution with HTTP 500: traceback: ` + refusal: http.StatusBadGateway,
		wire.MalformedMetadata("seed", []byte(`{}`), "a string").Error():  http.StatusBadGateway,
		"runtime is unknown": http.StatusBadRequest,
		"the sandbox failed": http.StatusBadGateway,
	} {
		if got := rejectionError(&outcome{errMsg: msg}); got.status != want {
			t.Errorf("rejection %q answered %d %s, want %d", msg, got.status, got.code, want)
		}
	}
}
