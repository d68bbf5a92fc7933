package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// MetadataError refuses one field of a request's metadata: malformed, or (network_allow) wider than this
// server allows. Its text names the field first (`field "metadata.seed" must be …`,
// `field "metadata.network_allow": …`): a worker relays a refusal to its hub as that text alone
// (bridge-protocol §6.3), and the hub recognises it with ParseMetadataError to answer 400, not 502.
type MetadataError struct {
	Field string // the metadata member: "deterministic", "seed", "now", "network_allow", "timeout_seconds"
	text  string
}

func (e *MetadataError) Error() string { return e.text }

const metadataPrefix = `field "metadata.`

// MalformedMetadata refuses a field whose value is not what it must be (want), quoting the value.
func MalformedMetadata(field string, raw json.RawMessage, want string) *MetadataError {
	got := Abbrev(string(bytes.TrimSpace(raw)), 64)
	return &MetadataError{Field: field, text: metadataPrefix + field + `" must be ` + want + ", got " + got}
}

// RefusedNetworkAllow refuses metadata.network_allow for why (the egress policy's error).
func RefusedNetworkAllow(why error) *MetadataError {
	return &MetadataError{Field: "network_allow", text: metadataPrefix + `network_allow": ` + why.Error()}
}

// ParseMetadataError recognises a MetadataError's text relayed as msg.
func ParseMetadataError(msg string) (*MetadataError, bool) {
	rest, ok := strings.CutPrefix(msg, metadataPrefix)
	if !ok {
		return nil, false
	}
	field, _, ok := strings.Cut(rest, `"`)
	if !ok || field == "" {
		return nil, false
	}
	return &MetadataError{Field: field, text: msg}, true
}

// Determinism is a request's deterministic-mode choice: metadata.deterministic, metadata.seed and
// metadata.now. OpenAI's metadata values are strings, so each is accepted as a string ("true",
// "2024-01-02T03:04:05Z", "1704164645") and, for clients that send typed JSON, as a boolean or number.
type Determinism struct {
	On   *bool     // nil: absent (the operator's default applies)
	Seed *string   // nil: absent (the empty seed)
	Now  time.Time // zero: absent (the bag's now where there is one, else the default clock)
}

// Absent reports that the request chose nothing.
func (d Determinism) Absent() bool { return d.On == nil && d.Seed == nil && d.Now.IsZero() }

// ErrSeedWithoutMode refuses a seed or a clock sent while the run is not deterministic.
var ErrSeedWithoutMode = &MetadataError{Field: "deterministic",
	text: `metadata.seed and metadata.now need deterministic mode: send metadata.deterministic "true"`}

// Enabled resolves the choice against the operator's default (--deterministic): whether the run is
// deterministic. A seed or a clock for a run that is not is refused (ErrSeedWithoutMode).
func (d Determinism) Enabled(operatorDefault bool) (bool, error) {
	on := operatorDefault
	if d.On != nil {
		on = *d.On
	}
	if !on && (d.Seed != nil || !d.Now.IsZero()) {
		return false, ErrSeedWithoutMode
	}
	return on, nil
}

// DecodeDeterminism parses the deterministic-mode fields of a metadata object; null is absent.
func DecodeDeterminism(meta map[string]json.RawMessage) (Determinism, *MetadataError) {
	var d Determinism
	if raw, ok := meta["deterministic"]; ok && JSONKind(raw) != "null" {
		v := string(bytes.TrimSpace(raw))
		var s string
		if jsonString(raw, &s) {
			v = s
		}
		switch v {
		case "true", "false":
			on := v == "true"
			d.On = &on
		default:
			return d, MalformedMetadata("deterministic", raw, `"true" or "false"`)
		}
	}
	if raw, ok := meta["seed"]; ok && JSONKind(raw) != "null" {
		var s string
		switch JSONKind(raw) {
		case "string":
			_ = json.Unmarshal(raw, &s)
		case "number":
			s = string(bytes.TrimSpace(raw))
		default:
			return d, MalformedMetadata("seed", raw, "a string")
		}
		d.Seed = &s
	}
	if raw, ok := meta["now"]; ok && JSONKind(raw) != "null" {
		t, ok := ParseNow(raw)
		if !ok {
			return d, MalformedMetadata("now", raw, "an RFC 3339 time or Unix seconds")
		}
		d.Now = t
	}
	return d, nil
}

// ParseNow reads a clock value: an RFC 3339 string, or Unix seconds as a JSON number or a string of
// digits. The result is UTC and whole seconds (libfaketime's resolution for a start time).
func ParseNow(raw json.RawMessage) (time.Time, bool) {
	var s string
	if jsonString(raw, &s) {
		return ParseNowString(s)
	}
	if JSONKind(raw) != "number" {
		return time.Time{}, false
	}
	return parseUnix(string(bytes.TrimSpace(raw)))
}

// ParseNowString is ParseNow for a JSON string's value: RFC 3339, else Unix seconds in digits.
func ParseNowString(s string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return clampNow(t)
	}
	return parseUnix(s)
}

// parseUnix reads Unix seconds written as digits only.
func parseUnix(v string) (time.Time, bool) {
	if v == "" || strings.TrimLeft(v, "0123456789") != "" {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return clampNow(time.Unix(n, 0))
}

// clampNow keeps a clock libfaketime can print as a date (years 1970-9999).
func clampNow(t time.Time) (time.Time, bool) {
	t = t.UTC().Truncate(time.Second)
	if t.Unix() < 0 || t.Year() > 9999 {
		return time.Time{}, false
	}
	return t, true
}

// DecodeNetworkAllow parses metadata.network_allow: host names separated by commas (SplitNetworkAllow);
// nil when absent or null.
func DecodeNetworkAllow(meta map[string]json.RawMessage) (*[]string, *MetadataError) {
	raw := meta["network_allow"]
	if raw == nil || JSONKind(raw) == "null" {
		return nil, nil
	}
	var s string
	if !jsonString(raw, &s) {
		return nil, &MetadataError{Field: "network_allow",
			text: metadataPrefix + `network_allow" must be a string of comma-separated host names, got ` + JSONKind(raw)}
	}
	list := SplitNetworkAllow(s)
	return &list, nil
}

// SplitNetworkAllow splits a network_allow value at commas, dropping blanks around and between entries.
func SplitNetworkAllow(s string) []string {
	list := []string{}
	for _, d := range strings.Split(s, ",") {
		if d = strings.TrimSpace(d); d != "" {
			list = append(list, d)
		}
	}
	return list
}

// jsonString decodes raw into dst when it is a JSON string.
func jsonString(raw json.RawMessage, dst *string) bool {
	return JSONKind(raw) == "string" && json.Unmarshal(raw, dst) == nil
}
