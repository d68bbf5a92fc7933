package openai

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Determinism is a request's deterministic-mode choice (issue 21): metadata.deterministic, metadata.seed
// and metadata.now. OpenAI's metadata values are strings, so each is accepted as a string ("true",
// "2024-01-02T03:04:05Z", "1704164645") and, for clients that send typed JSON, as a boolean or number.
type Determinism struct {
	On   *bool     // nil: absent (the operator's default applies)
	Seed *string   // nil: absent
	Now  time.Time // zero: absent (the bag's now, else the default clock)
}

func badMeta(field string, raw json.RawMessage, want string) *Error {
	return NewError(http.StatusBadRequest, "invalid_metadata", `field "metadata.%s" must be %s, got %s`,
		field, want, truncate(string(bytes.TrimSpace(raw)), 64))
}

// DecodeDeterminism parses the three deterministic-mode fields of a metadata object (also the debugger's).
func DecodeDeterminism(meta map[string]json.RawMessage) (Determinism, *Error) {
	var d Determinism
	if raw, ok := meta["deterministic"]; ok && !isNull(raw) {
		var s string
		v := string(bytes.TrimSpace(raw))
		if str(raw, &s) {
			v = s
		}
		switch v {
		case "true":
			d.On = new(bool)
			*d.On = true
		case "false":
			d.On = new(bool)
		default:
			return d, badMeta("deterministic", raw, `"true" or "false"`)
		}
	}
	if raw, ok := meta["seed"]; ok && !isNull(raw) {
		var s string
		switch kind(raw) {
		case "string":
			_ = json.Unmarshal(raw, &s)
		case "number":
			s = string(bytes.TrimSpace(raw))
		default:
			return d, badMeta("seed", raw, "a string")
		}
		d.Seed = &s
	}
	if raw, ok := meta["now"]; ok && !isNull(raw) {
		t, ok := ParseNow(raw)
		if !ok {
			return d, badMeta("now", raw, "an RFC 3339 time or Unix seconds")
		}
		d.Now = t
	}
	return d, nil
}

// ParseNow reads a clock value: an RFC 3339 string, or Unix seconds as a JSON number or a string of
// digits. The result is UTC and whole seconds (libfaketime's resolution for a start time).
func ParseNow(raw json.RawMessage) (time.Time, bool) {
	var s string
	if str(raw, &s) {
		return parseNowString(s)
	}
	if kind(raw) != "number" {
		return time.Time{}, false
	}
	return parseUnix(string(bytes.TrimSpace(raw)))
}

// parseNowString is ParseNow for a JSON string's value: RFC 3339, else Unix seconds in digits.
func parseNowString(s string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return clamp(t)
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
	return clamp(time.Unix(n, 0))
}

// clamp keeps a clock libfaketime can print as a date (years 1970-9999).
func clamp(t time.Time) (time.Time, bool) {
	t = t.UTC().Truncate(time.Second)
	if t.Unix() < 0 || t.Year() > 9999 {
		return time.Time{}, false
	}
	return t, true
}
