package engine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// DeterminismError rejects a request's choice. Unavailable: the sandbox cannot honour it (Missing names
// the piece); otherwise the request is malformed.
type DeterminismError struct {
	Unavailable bool
	Missing     string
	Msg         string
}

func (e *DeterminismError) Error() string {
	if e.Unavailable {
		return "deterministic mode is unavailable on this server: it needs " + e.Missing
	}
	return e.Msg
}

// Determinism resolves a request's choice (wire.Determinism: On nil means the operator's default,
// Config.Deterministic; Seed nil the empty seed; Now zero the bag's "now", else sandbox.DefaultNow)
// against the operator's default and the bag's "now" (an RFC 3339 string or Unix seconds): nil when the
// run is not deterministic.
func (e *Engine) Determinism(c wire.Determinism, bag []byte) (*sandbox.Determinism, error) {
	on, err := c.Enabled(e.cfg.Deterministic)
	if err != nil {
		return nil, &DeterminismError{Msg: err.Error()}
	}
	if !on {
		return nil, nil
	}
	if sb := e.cfg.Pipeline.Sandbox; sb == nil {
		return nil, &DeterminismError{Unavailable: true, Missing: "a sandbox"}
	} else if missing := sb.DeterminismMissing(); missing != "" {
		return nil, &DeterminismError{Unavailable: true, Missing: missing}
	}
	d := &sandbox.Determinism{Now: c.Now}
	if c.Seed != nil {
		d.Seed = *c.Seed
	}
	if d.Now.IsZero() {
		now, err := bagNow(bag)
		if err != nil {
			return nil, err
		}
		d.Now = now
	}
	return d, nil
}

// bagNow is the bag's "now" field (sandbox.DefaultNow when absent), read as metadata.now is.
func bagNow(bag []byte) (time.Time, error) {
	var top struct {
		Now json.RawMessage `json:"now"`
	}
	if len(bag) == 0 || json.Unmarshal(bag, &top) != nil || len(top.Now) == 0 || wire.JSONKind(top.Now) == "null" {
		return sandbox.DefaultNow, nil
	}
	if t, ok := wire.ParseNow(top.Now); ok {
		return t, nil
	}
	return time.Time{}, &DeterminismError{Msg: fmt.Sprintf("the bag's now must be an RFC 3339 time or Unix seconds, got %.64s", top.Now)}
}

// DeterminismHeaderValue is wire.DeterminismHeader's value for d: its seed and clock.
func DeterminismHeaderValue(d *sandbox.Determinism) string {
	return wire.DeterminismHeaderValue(d.Seed, wire.FormatNow(d.Now))
}
