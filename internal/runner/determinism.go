package runner

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// ErrDeterministicUnavailable: the request asked for deterministic mode and this server's sandbox cannot
// honour every piece of it (501, wire.CodeDeterministicUnavailable). Nothing ran.
var ErrDeterministicUnavailable = errors.New("deterministic mode unavailable")

// Deterministic is the reply's record of a deterministic run: the seed and clock it ran with (the
// wire.DeterminismHeader header says the same).
type Deterministic struct {
	Seed string `json:"seed"`
	Now  string `json:"now"` // RFC 3339, UTC
}

// determinism resolves the request's metadata.deterministic, metadata.seed and metadata.now (the chat
// routes' fields and value forms, wire.DecodeDeterminism) against the operator's default
// (Config.Deterministic): nil when the run is not deterministic. Piston has no such fields; a Piston
// client that sends none gets the operator's default. There is no bag here, so the clock defaults to
// sandbox.DefaultNow.
func (r *Runner) determinism(meta map[string]json.RawMessage) (*sandbox.Determinism, *Error) {
	c, me := wire.DecodeDeterminism(meta)
	if me != nil {
		return nil, badRequest(me.Error())
	}
	on, err := c.Enabled(r.cfg.Deterministic)
	if err != nil {
		return nil, badRequest(err.Error())
	}
	if !on {
		return nil, nil
	}
	if missing := r.cfg.Sandbox.DeterminismMissing(); missing != "" {
		return nil, &Error{Status: http.StatusNotImplemented, Code: wire.CodeDeterministicUnavailable, Kind: ErrDeterministicUnavailable,
			Message: "deterministic mode is unavailable on this server: it needs " + missing}
	}
	d := &sandbox.Determinism{Now: c.Now}
	if c.Seed != nil {
		d.Seed = *c.Seed
	}
	if d.Now.IsZero() {
		d.Now = sandbox.DefaultNow
	}
	return d, nil
}

// headerValue is wire.DeterminismHeader's value for the run.
func (d *Deterministic) headerValue() string { return wire.DeterminismHeaderValue(d.Seed, d.Now) }

// deterministicReply is the reply's record of d (nil when off).
func deterministicReply(d *sandbox.Determinism) *Deterministic {
	if d == nil {
		return nil
	}
	return &Deterministic{Seed: d.Seed, Now: wire.FormatNow(d.Now)}
}
