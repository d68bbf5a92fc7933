package interp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Reserved are the variables codellm sets for every block (§7). Neither an interpreter entry nor an
// exposure may set them: a block must always find its own workdir, tmp and input there.
var Reserved = []string{"PATH", "HOME", "TMPDIR", "LANG", "FLEET_INPUT", "CODELLM_INPUT"}

// configPrefix marks codellm's own configuration variables (CODELLM_API_KEY, …), which never reach code.
const configPrefix = "CODELLM_"

// ErrInvalidExposure is wrapped by every --expose-env / --expose-env-prefix error from Exposed.
var ErrInvalidExposure = errors.New("invalid environment exposure")

// Env builds a block's complete environment (§7): the fixed variables for workdir dir, then the
// interpreter's env, then the exposed "NAME=value" entries (from Exposed). Nothing is inherited from
// codellm's own environment. dir must be absolute.
func Env(dir string, in Interpreter, exposed []string) []string {
	input := filepath.Join(dir, "input.json")
	env := make([]string, 0, 6+len(in.Env)+len(exposed))
	env = append(env,
		"PATH="+ChildPATH,
		"HOME="+dir,
		"TMPDIR="+filepath.Join(dir, "tmp"),
		"LANG=C.UTF-8",
		"FLEET_INPUT="+input,
		"CODELLM_INPUT="+input,
	)
	for _, e := range in.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	return append(env, exposed...)
}

// Exposed selects the operator-exposed variables (§7) from environ (codellm's environment at startup,
// e.g. os.Environ()) and returns them as "NAME=value" entries sorted by name.
//
// names are --expose-env values, each possibly comma-separated; prefixes are --expose-env-prefix values.
// A name absent from environ stays unset. codellm's configuration (CODELLM_*) is never exposed: asking for
// such a name is an error, and prefix matches skip them. An empty prefix, an invalid name, a reserved name
// or a name an interpreter entry of r also sets — whether named or matched by a prefix — is an error,
// because the block would otherwise see a value other than the one the operator chose.
func Exposed(environ []string, names, prefixes []string, r *Registry) ([]string, error) {
	values := map[string]string{}
	var order []string // environ names in first-seen order; the first occurrence wins, as in getenv
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := values[k]; dup {
			continue
		}
		values[k] = v
		order = append(order, k)
	}

	setBy := map[string]string{} // env name → interpreter that sets it
	if r != nil {
		for _, in := range r.list {
			for _, e := range in.Env {
				setBy[e.Name] = in.Name
			}
		}
	}
	conflict := func(name string) error {
		if slices.Contains(Reserved, name) {
			return fmt.Errorf("%s is reserved (set by codellm for every block)", name)
		}
		if in, ok := setBy[name]; ok {
			return fmt.Errorf("%s is also set by interpreter %q", name, in)
		}
		return nil
	}

	chosen := map[string]string{}
	for _, item := range names {
		for _, name := range strings.Split(item, ",") {
			name = strings.TrimSpace(name)
			switch {
			case !envNameRE.MatchString(name):
				return nil, fmt.Errorf("%w: --expose-env %q: not a variable name", ErrInvalidExposure, name)
			case strings.HasPrefix(name, configPrefix):
				return nil, fmt.Errorf("%w: --expose-env %s: codellm's own configuration (%s*) is never exposed",
					ErrInvalidExposure, name, configPrefix)
			}
			if err := conflict(name); err != nil {
				return nil, fmt.Errorf("%w: --expose-env %w", ErrInvalidExposure, err)
			}
			if v, ok := values[name]; ok {
				chosen[name] = v
			}
		}
	}
	for _, prefix := range prefixes {
		if prefix == "" {
			return nil, fmt.Errorf("%w: --expose-env-prefix is empty (it would expose the whole environment)", ErrInvalidExposure)
		}
		for _, name := range order {
			if !strings.HasPrefix(name, prefix) || strings.HasPrefix(name, configPrefix) {
				continue
			}
			if err := conflict(name); err != nil {
				return nil, fmt.Errorf("%w: --expose-env-prefix %q matches %w", ErrInvalidExposure, prefix, err)
			}
			chosen[name] = values[name]
		}
	}

	sorted := make([]string, 0, len(chosen))
	for name := range chosen {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	out := make([]string, len(sorted))
	for i, name := range sorted {
		out[i] = name + "=" + chosen[name]
	}
	return out, nil
}

// BagEnvError is a delivery bag whose env_passthrough or env_prefix is not a list of strings (400
// invalid_fleet_input). trip2g ignores such a value, which would leave the role seeing the operator's whole
// exposure; codellm refuses it instead, so a declaration can only ever narrow.
type BagEnvError struct{ Field string }

func (e *BagEnvError) Error() string {
	return fmt.Sprintf("fleet_input %s must be a list of strings", e.Field)
}

// Narrow applies a role's own env declaration (trip2g's bag fields env_passthrough: exact names,
// env_prefix: name prefixes) to the operator's exposure: a block sees an exposed variable only when the
// role names it or it starts with one of the role's prefixes. It never widens — a name the operator did
// not expose stays unset whatever the role asks — and a role that declares neither (or sends empty
// lists, or a bag that is not a JSON object) keeps the whole exposure, as on trip2g. exposed holds
// "NAME=value" entries (from Exposed); the result is a subset in the same order.
func Narrow(exposed []string, bag []byte) ([]string, error) {
	names, err := bagStrings(bag, "env_passthrough")
	if err != nil {
		return nil, err
	}
	prefixes, err := bagStrings(bag, "env_prefix")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 && len(prefixes) == 0 {
		return exposed, nil
	}
	out := []string{}
	for _, kv := range exposed {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(names, name) || slices.ContainsFunc(prefixes, func(p string) bool {
			return p != "" && strings.HasPrefix(name, p)
		}) {
			out = append(out, kv)
		}
	}
	return out, nil
}

// bagStrings reads a list-of-strings field of a JSON-object bag; absent, null or a non-object bag is nil.
func bagStrings(bag []byte, field string) ([]string, error) {
	t := bytes.TrimSpace(bag)
	if len(t) == 0 || t[0] != '{' {
		return nil, nil
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(t, &doc) != nil {
		return nil, nil
	}
	raw, ok := doc[field]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, &BagEnvError{Field: field}
	}
	return list, nil
}
