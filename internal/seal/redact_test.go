package seal

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// secretWithEverything needs escaping in every encoder: a quote, a backslash, a newline, HTML characters,
// a slash, non-ASCII (BMP and astral).
const secretWithEverything = "pä\"ss\\wo\nrd<&>/🔑-tail"

func jsonGo(t *testing.T, s string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSpace(b.String())
	return out[1 : len(out)-1]
}

// Every spelling an encoder gives the secret is redacted (issue 35 item 12: a block printing its bag with
// json.dumps showed the secret JSON-escaped, and it reached the caller). The Python spelling is written
// out by hand (json.dumps' default ensure_ascii).
func TestRedactEscapedSpellings(t *testing.T) {
	s := secretWithEverything
	python := `p\u00e4\"ss\\wo\nrd<&>/\ud83d\udd11-tail`
	for name, spelled := range map[string]string{
		"raw":               s,
		"go json":           jsonGo(t, s, true),
		"go json, no html":  jsonGo(t, s, false),
		"python json.dumps": python,
		"strconv.Quote":     strconv.Quote(s),
		"quoted python":     strconv.Quote(python),
		"json of python":    jsonGo(t, python, false),
		"php json_encode":   `p\u00e4\"ss\\wo\nrd<&>\/\ud83d\udd11-tail`,
	} {
		text := "before " + spelled + " after"
		got := Redact(text, []string{s})
		if strings.Contains(got, "-tail") || !strings.Contains(got, Redacted) {
			t.Errorf("%s: %q redacted to %q", name, text, got)
		}
	}
	if got := Redact("nothing to see", []string{s}); got != "nothing to see" {
		t.Errorf("text without the secret changed: %q", got)
	}
}

// What a cut leaves of a secret beside a cut marker is redacted too (issue 35 item 12: an output cut
// split the secret, and the part it kept escaped redaction): the stderr tail of an error message ("…"
// then the end of the secret), a bad_output snippet (the start of the secret, its closing quote, "…"),
// the stderr capture's drop line, and a capture cut at its end.
func TestRedactWhatACutLeft(t *testing.T) {
	s := "hunter2-correct-horse"
	for name, c := range map[string]struct {
		text string
		end  bool
	}{
		"stderr tail":   {"block 1/1: non-zero exit (code 1): …orrect-horse then more", false},
		"snippet":       {`bad output: "{\"x\": \"hunter2-corr"…`, false},
		"dropped head":  {"[codellm: 99 bytes of stderr dropped]\nct-horse\nTraceback", false},
		"truncated end": {"stdout up to the cap: hunter2-c", true},
	} {
		var got string
		if c.end {
			got = string(RedactTruncated([]byte(c.text), []string{s}))
		} else {
			got = Redact(c.text, []string{s})
		}
		for k := 4; k < len(s); k++ { // no piece of 4 bytes or more survives at either end
			if strings.Contains(got, s[:k]) || strings.Contains(got, s[len(s)-k:]) {
				t.Errorf("%s: %q kept a piece of the secret", name, got)
				break
			}
		}
		if !strings.Contains(got, Redacted) {
			t.Errorf("%s: nothing redacted in %q", name, got)
		}
	}
	// Without a cut marker, text that merely shares a letter with the secret's ends is left alone.
	if got := Redact("2 errors, one h", []string{s}); got != "2 errors, one h" {
		t.Errorf("uncut text changed: %q", got)
	}
}
