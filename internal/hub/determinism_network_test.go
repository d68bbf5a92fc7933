package hub

import (
	"net/http"
	"testing"

	"github.com/codellm/codellm/internal/sandbox"
)

// A worker's runner refuses a deterministic request with network (issue 35 item 6); the hub relays that
// refusal as the client's 400, like every refusal of metadata.network_allow, never as a 502.
func TestDeterministicNetworkRefusalIs400(t *testing.T) {
	e := rejectionError(&outcome{status: "rejected", errMsg: sandbox.DeterministicNetworkRefusal})
	if e.status != http.StatusBadRequest || e.code != "invalid_request" {
		t.Fatalf("relayed as %d %s, want 400 invalid_request", e.status, e.code)
	}
}
