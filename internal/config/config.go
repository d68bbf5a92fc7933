// Package config is codellm's one configuration loader. A command describes its settings in one table
// (name, flag, every environment spelling, kind, default, usage); from that table it registers its flags,
// prints --help, reads the environment and documents itself, so serve, run, hub, worker and the rest read
// configuration by the same rules:
//
// Precedence, highest first:
//  1. the command line: the setting's own flag (--listen), then its alias flags in table order (trip2g's
//     -addr);
//  2. CODELLM_<ENV> (ENV is the flag in upper snake case unless the table says otherwise: the hub's
//     --listen is CODELLM_HUB_LISTEN);
//  3. the command's alias families in order: LIBRECHAT_CODE_<ENV> for the worker and the hub;
//  4. the setting's own alias variables in table order (the reference's CODEAPI_BRIDGE_TOKEN, trip2g's
//     CODELLM_ADDR);
//  5. the default.
//
// Empty values: a variable set to "" counts as unset, so a blank line of an env file neither overrides a
// default nor hides a lower spelling, unless the setting says the empty value means something
// (--allowed-programs: empty disables execution). On the command line an empty value is always a value.
//
// Two spellings: when several spellings of one setting are given and their values differ in meaning (64M
// and 64MiB do not differ, nor 1m and 60s), the highest wins and one warning names both (Values.Warn,
// logged with slog). A secret's value is never logged.
//
// The command line: flags may come anywhere among the positional arguments (`run role.md --input
// bag.json`), with one dash or two, "--" ends them (Parse).
//
// Bad values: the error names the spelling the value came from, the value and the setting, on one line
// followed by where --help is; commands exit ExitUsage (2), the shared exit code of every command-line or
// settings mistake (args.go lists every exit code). Sizes are internal/bytesize's (64M, 64MB, 64MiB),
// durations Go's (90s, 1m30s).
package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bytesize"
)

// Kind is the syntax of a setting's values.
type Kind int

const (
	String   Kind = iota
	Bool          // strconv.ParseBool: true, false, 1, 0, …
	Int           // a whole number
	Size          // bytes, internal/bytesize
	Duration      // time.ParseDuration
	List          // comma-separated; the flag may be repeated; blanks dropped
)

// placeholder is the word --help shows after a flag of the kind.
func (k Kind) placeholder() string {
	return [...]string{"STRING", "", "N", "SIZE", "DURATION", "LIST"}[k]
}

// Family is a prefix under which a command also reads every setting (LIBRECHAT_CODE_<ENV>).
type Family struct {
	Name   string // whose names these are, for warnings and docs ("LibreChat")
	Prefix string // "LIBRECHAT_CODE_"
}

// LibreChat is LibreChat's code-interpreter worker and hub family: LIBRECHAT_CODE_<ENV> (bridge-protocol §12).
var LibreChat = Family{Name: "LibreChat", Prefix: "LIBRECHAT_CODE_"}

// Alias is one more spelling of one setting, a flag, a variable or both.
type Alias struct {
	Flag   string // a flag name without dashes ("addr"); "" for none
	Env    string // a variable ("CODELLM_ADDR"); "" for none
	Family string // whose name it is ("trip2g", "CODEAPI_BRIDGE", "codellm")
	Unset  string // a value of this spelling that means "not given" (trip2g's -max-stdout-bytes 0: its default)
}

// Setting is one row of a command's table.
type Setting struct {
	Name         string // the flag without dashes ("max-output-bytes"); for an EnvOnly setting, a name for messages
	Env          string // the variable after CODELLM_ (default: Name in upper snake case)
	EnvExact     bool   // Env is the whole variable, a peer's name (the runtime image's SANDBOX_EXTERNAL_WORKSPACE_*): no CODELLM_, no families
	Kind         Kind
	Default      string // in the setting's own syntax ("10MiB", "300s"); "" is the kind's zero
	Usage        string
	EnvOnly      bool    // read from the environment only: no flag
	FlagOnly     bool    // read from the command line only: a per-call argument (hub pair --tenant), no variable
	NoFamilies   bool    // the command's families do not apply (the worker's --sandbox: LIBRECHAT_CODE_SANDBOX_* means other things)
	EmptyIsValue bool    // an empty variable sets the empty value instead of counting as unset
	Secret       bool    // never log or print the value
	Positive     bool    // an Int, Size or Duration must be above zero
	Aliases      []Alias // further spellings, in precedence order within their kind (flags, variables)
	Check        func(string) error
}

// EnvName is the setting's CODELLM_ variable (or, with EnvExact, its one variable).
func (s *Setting) EnvName() string {
	if s.EnvExact {
		return s.Env
	}
	if s.Env != "" {
		return "CODELLM_" + s.Env
	}
	return "CODELLM_" + strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
}

// Spelling is one way a setting may be given: a flag ("--listen") or a variable ("CODELLM_LISTEN").
type Spelling struct {
	Name   string // "--listen", "-addr", "CODELLM_LISTEN"
	Family string // "codellm", "LibreChat", "trip2g", …
	flag   string // the flag name, for flag spellings
	env    string // the variable, for environment spellings
	unset  string
}

// IsFlag reports whether the spelling is on the command line.
func (p Spelling) IsFlag() bool { return p.flag != "" }

// Spellings lists every spelling of s under the families, highest precedence first.
func (s *Setting) Spellings(families []Family) []Spelling {
	var out []Spelling
	if !s.EnvOnly {
		out = append(out, Spelling{Name: "--" + s.Name, Family: "codellm", flag: s.Name})
	}
	for _, a := range s.Aliases {
		if a.Flag != "" {
			out = append(out, Spelling{Name: "-" + a.Flag, Family: a.Family, flag: a.Flag, unset: a.Unset})
		}
	}
	if s.FlagOnly {
		return out
	}
	out = append(out, Spelling{Name: s.EnvName(), Family: "codellm", env: s.EnvName()})
	if !s.NoFamilies && !s.EnvExact {
		suffix := strings.TrimPrefix(s.EnvName(), "CODELLM_")
		for _, f := range families {
			out = append(out, Spelling{Name: f.Prefix + suffix, Family: f.Name, env: f.Prefix + suffix})
		}
	}
	for _, a := range s.Aliases {
		if a.Env != "" {
			out = append(out, Spelling{Name: a.Env, Family: a.Family, env: a.Env, unset: a.Unset})
		}
	}
	return out
}

// parse reads one raw value of s into its typed form (string, bool, int, int64, time.Duration, []string).
func (s *Setting) parse(raw string) (any, error) {
	if s.Check != nil && s.Kind != List {
		if err := s.Check(raw); err != nil {
			return nil, err
		}
	}
	switch s.Kind {
	case Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return nil, fmt.Errorf("want true or false")
		}
		return b, nil
	case Int:
		n, err := strconv.ParseInt(raw, 0, strconv.IntSize)
		if err != nil {
			return nil, fmt.Errorf("want a whole number")
		}
		return int(n), s.positive(n > 0)
	case Size:
		n, err := bytesize.Parse(raw)
		if err != nil {
			return nil, err
		}
		return n, s.positive(n > 0)
	case Duration:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return nil, fmt.Errorf("want a duration such as 90s or 5m")
		}
		return d, s.positive(d > 0)
	case List:
		return s.parseList([]string{raw})
	}
	return raw, nil
}

func (s *Setting) positive(ok bool) error {
	if s.Positive && !ok {
		return fmt.Errorf("must be positive")
	}
	return nil
}

// parseList splits each raw value on commas and drops blanks. Check sees each element, and "" for a raw
// value without any (so a check can refuse an empty value).
func (s *Setting) parseList(raws []string) ([]string, error) {
	out := []string{}
	for _, raw := range raws {
		n := len(out)
		for _, p := range strings.Split(raw, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		if s.Check == nil {
			continue
		}
		if len(out) == n {
			if err := s.Check(""); err != nil {
				return nil, err
			}
		}
		for _, p := range out[n:] {
			if err := s.Check(p); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// show is how a value of s may appear in a message.
func (s *Setting) show(raw string) string {
	if s.Secret {
		return "<redacted>"
	}
	return strconv.Quote(raw)
}

// Error is a bad value: which spelling gave it, the value, and the setting it was for.
type Error struct {
	Spelling string // "CODELLM_MAX_BODY"
	Value    string // quoted, or <redacted> for a secret
	Setting  string // "--max-body-bytes" (or the primary variable of an environment-only setting)
	Err      error
}

func (e *Error) Error() string {
	if e.Setting == e.Spelling {
		return fmt.Sprintf("%s=%s: %v", e.Spelling, e.Value, e.Err)
	}
	return fmt.Sprintf("%s=%s (%s): %v", e.Spelling, e.Value, e.Setting, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// display is how messages name the setting.
func (s *Setting) display() string {
	if s.EnvOnly {
		return s.EnvName()
	}
	return "--" + s.Name
}
