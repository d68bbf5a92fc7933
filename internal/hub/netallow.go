package hub

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/wire"
)

// execNetworkAllow adds a /v1/exec request's metadata.network_allow to the runner metadata meta (nil:
// none yet). The hub checks the syntax only: the worker's runner alone knows its --network-allow and
// refuses a wider list, which rejectionError relays as 400.
func execNetworkAllow(meta *bridge.Object, raw map[string]json.RawMessage) (*bridge.Object, *clientError) {
	list, me := wire.DecodeNetworkAllow(raw)
	if me != nil {
		return nil, &clientError{status: http.StatusBadRequest, code: "invalid_request", message: me.Error()}
	}
	if list == nil {
		return meta, nil
	}
	if _, err := egress.Parse(*list); err != nil {
		return nil, &clientError{status: http.StatusBadRequest, code: "invalid_request", message: wire.RefusedNetworkAllow(err).Error()}
	}
	if meta == nil {
		meta = &bridge.Object{}
	}
	meta.Set("network_allow", strings.Join(*list, ","))
	return meta, nil
}

// networkAllowRefused recognises the worker's refusal of a request's egress list, relayed as its text
// (its runner's and chat core's 400 are both a wire.MetadataError of network_allow): a client error,
// relayed as 400, never a 502.
func networkAllowRefused(msg string) bool {
	e, ok := wire.ParseMetadataError(msg)
	return ok && e.Field == "network_allow"
}
