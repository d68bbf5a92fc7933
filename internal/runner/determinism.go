package runner

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// ErrDeterministicUnavailable: the request asked for deterministic mode and this server's sandbox cannot
// honour every piece of it (501, CodeDeterministicUnavailable). Nothing ran.
var ErrDeterministicUnavailable = errors.New("deterministic mode unavailable")

// DeterminismHeader says on a reply that the run was deterministic, and with what: the chat routes'
// header (engine.DeterminismHeader), same value.
const DeterminismHeader = "X-Codellm-Deterministic"

// CodeDeterministicUnavailable is the "error" member of a 501 reply to a deterministic request this
// server cannot honour (the chat routes' code of the same name).
const CodeDeterministicUnavailable = "deterministic_unavailable"

// Deterministic is the reply's record of a deterministic run: the seed and clock it ran with (the
// X-Codellm-Deterministic header says the same).
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
	on := r.cfg.Deterministic
	if c.On != nil {
		on = *c.On
	}
	if !on {
		if c.Seed != nil || !c.Now.IsZero() {
			return nil, badRequest(`metadata.seed and metadata.now need deterministic mode: send metadata.deterministic "true"`)
		}
		return nil, nil
	}
	if missing := r.cfg.Sandbox.DeterminismMissing(); missing != "" {
		return nil, &Error{Status: http.StatusNotImplemented, Code: CodeDeterministicUnavailable, Kind: ErrDeterministicUnavailable,
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

// headerValue is DeterminismHeader's value: seed="…"; now=RFC 3339 (as engine.DeterminismHeaderValue).
func (d *Deterministic) headerValue() string {
	return "seed=" + strconv.QuoteToASCII(d.Seed) + "; now=" + d.Now
}

// deterministicReply is the reply's record of d (nil when off).
func deterministicReply(d *sandbox.Determinism) *Deterministic {
	if d == nil {
		return nil
	}
	return &Deterministic{Seed: d.Seed, Now: d.Now.UTC().Format(time.RFC3339)}
}
