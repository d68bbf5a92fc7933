package hub

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/wire"
)

// runnerDeterministicUnavailable is the runner's error code for a deterministic request its sandbox
// cannot honour; the hub answers it 501, as the server does.
const runnerDeterministicUnavailable = wire.CodeDeterministicUnavailable

// execMetadata validates /v1/exec's metadata.deterministic, .seed and .now (the chat routes' fields and
// value forms) before anything is dispatched, and returns them normalised for the runner request (nil
// when none was sent; other metadata members are not forwarded). They are part of the body, so the
// Idempotency-Key fingerprint covers them: the same key with another seed or clock is a different request.
func execMetadata(meta map[string]json.RawMessage) (*bridge.Object, *clientError) {
	d, me := wire.DecodeDeterminism(meta)
	if me != nil {
		return nil, &clientError{status: http.StatusBadRequest, code: "invalid_request", message: me.Error()}
	}
	if d.Absent() {
		return nil, nil
	}
	o := &bridge.Object{}
	if d.On != nil {
		o.Set("deterministic", strconv.FormatBool(*d.On))
	}
	if d.Seed != nil {
		o.Set("seed", *d.Seed)
	}
	if !d.Now.IsZero() {
		o.Set("now", wire.FormatNow(d.Now))
	}
	return o, nil
}

// deterministicHeader is wire.DeterminismHeader's value for a runner reply that records a deterministic run
// ("deterministic": {seed, now}), "" otherwise.
func deterministicHeader(result *bridge.Object) string {
	v, _ := result.Get("deterministic")
	o, ok := v.(*bridge.Object)
	if !ok {
		return ""
	}
	seed, _ := o.Get("seed")
	now, _ := o.Get("now")
	s, ok1 := seed.(string)
	n, ok2 := now.(string)
	if !ok1 || !ok2 {
		return ""
	}
	return wire.DeterminismHeaderValue(s, n)
}
