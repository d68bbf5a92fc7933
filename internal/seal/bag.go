package seal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Error is why a bag's declared secrets could not be opened (HTTP 422 unseal_error). Field is the
// frontmatter field at fault, "" when the problem is the declaration itself. The message never says
// anything about the key beyond its variable's name.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// KeyEnvAllowed reports whether a bag may name env as its key variable: SEAL_KEY or SEAL_KEY_<suffix>
// (rotation: SEAL_KEY_V2). trip2g accepts any name; codellm refuses the rest so that a bag cannot use an
// arbitrary variable of codellm's environment (its API key, say) as an oracle key.
func KeyEnvAllowed(env string) bool {
	if env == DefaultKeyEnv {
		return true
	}
	rest, ok := strings.CutPrefix(env, DefaultKeyEnv+"_")
	if !ok || rest == "" {
		return false
	}
	for _, c := range rest {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Unseal opens the frontmatter fields the bag lists in "unseal" and returns the bag with a "secrets"
// object ({field: plaintext}) added, plus the plaintexts, so the caller can redact them from anything it
// reports. getenv resolves the key variable in codellm's own environment; exposed reports whether a
// variable is handed to the blocks, in which case unsealing is refused (any role could then open any blob).
//
// A bag that is not a JSON object, or declares nothing, is returned unchanged with no secrets. Every other
// value of the bag is kept byte for byte; a "secrets" the caller sent is replaced. A declared field that is
// missing, not a string, or not openable fails the whole bag: a role without its credential would only
// fail later and more confusingly.
func Unseal(bag []byte, getenv func(string) string, exposed func(string) bool) ([]byte, []string, error) {
	doc, ok := object(bag)
	if !ok {
		return bag, nil, nil
	}
	fields, err := declared(doc["unseal"])
	if err != nil || len(fields) == 0 {
		return bag, nil, err
	}
	keyEnv := DefaultKeyEnv
	if raw, ok := doc["unseal_env_key"]; ok && !isNull(raw) {
		var name string
		if json.Unmarshal(raw, &name) != nil || !KeyEnvAllowed(strings.TrimSpace(name)) {
			return nil, nil, &Error{Reason: `unseal failed: "unseal_env_key" must be ` + DefaultKeyEnv + " or " +
				DefaultKeyEnv + "_<SUFFIX>"}
		}
		keyEnv = strings.TrimSpace(name)
	}
	if exposed != nil && exposed(keyEnv) {
		return nil, nil, &Error{Reason: "seal key is exposed to code; refusing to unseal: " + keyEnv}
	}
	front, _ := object(doc["frontmatter"])
	key := getenv(keyEnv)
	secrets := map[string]string{}
	var opened []string
	for _, field := range fields {
		if _, done := secrets[field]; done {
			continue
		}
		var blob string
		raw, present := front[field]
		if !present || json.Unmarshal(raw, &blob) != nil {
			return nil, nil, &Error{Field: field, Reason: fmt.Sprintf("unseal failed: %q is not in the frontmatter", field)}
		}
		plain, err := Open(key, blob)
		if err == ErrNotSealed {
			return nil, nil, &Error{Field: field, Reason: fmt.Sprintf("unseal failed for %q: the value is not a %s blob", field, Prefix)}
		}
		if err != nil { // wrong, missing or malformed key: one message for all, so nothing about the key leaks
			return nil, nil, &Error{Field: field, Reason: fmt.Sprintf("unseal failed for %q", field)}
		}
		secrets[field] = plain
		opened = append(opened, plain)
	}
	enc, err := json.Marshal(secrets)
	if err != nil {
		return nil, nil, &Error{Reason: "unseal failed: cannot encode the secrets"}
	}
	doc["secrets"] = enc
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, &Error{Reason: "unseal failed: cannot encode the bag"}
	}
	return out, opened, nil
}

// declared reads the "unseal" list. Absent or null declares nothing; anything but a list of non-empty
// strings is an error (trip2g ignores such a value; ignoring it silently is what this feature fixes).
func declared(raw json.RawMessage) ([]string, error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	var fields []string
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, &Error{Reason: `unseal failed: "unseal" must be a list of frontmatter field names`}
	}
	for _, f := range fields {
		if f == "" {
			return nil, &Error{Reason: `unseal failed: "unseal" lists an empty field name`}
		}
	}
	return fields, nil
}

func object(raw []byte) (map[string]json.RawMessage, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(t, &m) != nil {
		return nil, false
	}
	return m, true
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// CoversKey reports whether an operator exposure (--expose-env names and --expose-env-prefix prefixes)
// would hand a seal key variable (SEAL_KEY or SEAL_KEY_*) to the blocks. serve refuses to start then: every
// role could open every blob, and nothing would look broken.
func CoversKey(names, prefixes []string) (string, bool) {
	for _, n := range names {
		if KeyEnvAllowed(n) {
			return "--expose-env " + n, true
		}
	}
	for _, p := range prefixes {
		if p != "" && (strings.HasPrefix(DefaultKeyEnv, p) || strings.HasPrefix(p, DefaultKeyEnv)) {
			return "--expose-env-prefix " + p, true
		}
	}
	return "", false
}

// ExposedIn adapts a block environment's "NAME=value" entries (engine.Config.Exposed) to Unseal's
// exposed argument.
func ExposedIn(env []string) func(string) bool {
	return func(name string) bool {
		for _, kv := range env {
			if k, _, _ := strings.Cut(kv, "="); k == name {
				return true
			}
		}
		return false
	}
}
