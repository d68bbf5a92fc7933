package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
)

// DeterminismChoice is a request's deterministic-mode choice (issue 21). On nil means the operator's
// default (Config.Deterministic); Seed nil means the empty seed; Now zero means the bag's "now", else
// sandbox.DefaultNow.
type DeterminismChoice struct {
	On   *bool
	Seed *string
	Now  time.Time
}

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

// Determinism resolves a request's choice against the operator's default and the bag's "now" (an RFC 3339
// string or Unix seconds): nil when the run is not deterministic.
func (e *Engine) Determinism(c DeterminismChoice, bag []byte) (*sandbox.Determinism, error) {
	on := e.cfg.Deterministic
	if c.On != nil {
		on = *c.On
	}
	if !on {
		if c.Seed != nil || !c.Now.IsZero() {
			return nil, &DeterminismError{Msg: `metadata.seed and metadata.now need deterministic mode: send metadata.deterministic "true"`}
		}
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

// bagNow is the bag's "now" field (sandbox.DefaultNow when absent).
func bagNow(bag []byte) (time.Time, error) {
	var top struct {
		Now json.RawMessage `json:"now"`
	}
	if len(bag) == 0 || json.Unmarshal(bag, &top) != nil || len(top.Now) == 0 || string(top.Now) == "null" {
		return sandbox.DefaultNow, nil
	}
	var s string
	if json.Unmarshal(top.Now, &s) == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t.UTC().Truncate(time.Second), nil
		}
	}
	v := strings.Trim(string(top.Now), `"`)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n < 253402300800 {
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Time{}, &DeterminismError{Msg: fmt.Sprintf("the bag's now must be an RFC 3339 time or Unix seconds, got %.64s", top.Now)}
}

// DeterminismHeader is the response header that says a run was deterministic, and with what.
const DeterminismHeader = "X-Codellm-Deterministic"

// DeterminismHeaderValue is DeterminismHeader's value for d: seed (quoted, ASCII) and clock.
func DeterminismHeaderValue(d *sandbox.Determinism) string {
	return "seed=" + strconv.QuoteToASCII(d.Seed) + "; now=" + d.Now.UTC().Format(time.RFC3339)
}
