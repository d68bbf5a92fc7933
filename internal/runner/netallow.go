package runner

import (
	"encoding/json"
	"fmt"

	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/wire"
)

// networkAllow reads metadata.network_allow, as the chat routes do: a comma-separated egress list that
// may only narrow the operator's (Config.NetworkAllow). Anything wider, or any list on a runner without
// an egress proxy, is 400 before anything runs; the message names the entry, and the hub relays it.
func (r *Runner) networkAllow(meta map[string]json.RawMessage) (*[]string, *Error) {
	list, me := wire.DecodeNetworkAllow(meta)
	if me != nil {
		return nil, badRequest(me.Error())
	}
	if list == nil {
		return nil, nil
	}
	var err error
	if r.cfg.NetworkAllow == nil {
		err = fmt.Errorf("%w: this runner has no egress allow-list (--network-allow)", egress.ErrPolicy)
	} else {
		_, err = r.cfg.NetworkAllow.Narrow(*list)
	}
	if err != nil {
		return nil, badRequest(wire.RefusedNetworkAllow(err).Error())
	}
	return list, nil
}
