package seal

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Redacted stands in for a secret wherever one would otherwise reach an operator or a caller.
const Redacted = "[redacted]"

// Redact replaces every opened secret in text with Redacted: the secret as written, in every spelling a
// JSON encoder or a Go quote gives it (spellings), and what is left of one where a cut marker split it
// (cutEdges). Exact: codellm knows the strings it decrypted. A secret the code transformed otherwise
// (base64, reversed) cannot be recognised and is not redacted.
func Redact(text string, secrets []string) string {
	return redact(text, spellings(secrets), false)
}

// RedactBytes is Redact for captured output; b is returned unchanged (not copied) when nothing matches.
func RedactBytes(b []byte, secrets []string) []byte {
	return redactBytes(b, secrets, false)
}

// RedactTruncated is RedactBytes for a capture cut at its end (a stdout or pipe capture over its cap):
// what the cut left of a secret at the very end is redacted too.
func RedactTruncated(b []byte, secrets []string) []byte {
	return redactBytes(b, secrets, true)
}

func redactBytes(b []byte, secrets []string, cutAtEnd bool) []byte {
	if len(secrets) == 0 {
		return b
	}
	s := string(b)
	if r := redact(s, spellings(secrets), cutAtEnd); r != s {
		return []byte(r)
	}
	return b
}

// spellings lists every secret in each way it can appear in output (longest first, so that a longer
// spelling is replaced before one it contains): as written; as JSON encoders escape it inside a string
// (issue 35 item 12: a block that printed its bag with json.dumps showed the secret escaped, and it
// escaped redaction), each spelling also Go-quoted (the bad_output snippet, strconv.Quote) and JSON-escaped
// again (a bag printed inside a JSON string).
func spellings(secrets []string) []string {
	set := map[string]bool{}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		set[s], set[quoteBody(s)] = true, true
		for _, j := range jsonSpellings(s) {
			set[j], set[quoteBody(j)] = true, true
			for _, jj := range jsonSpellings(j) {
				set[jj] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for f := range set {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return out
}

// jsonSpellings are s inside a JSON string as the common encoders write it: Python's json.dumps
// (non-ASCII as \u escapes by default), JavaScript's JSON.stringify and Go's encoding/json (HTML
// characters as \u escapes by default), PHP's json_encode (also "/" as "\/").
func jsonSpellings(s string) []string {
	var out []string
	for _, o := range []jsonStyle{{}, {ascii: true}, {html: true}, {ascii: true, slash: true}, {ascii: true, html: true}} {
		if j := o.escape(s); j != s {
			out = append(out, j)
		}
	}
	return out
}

// jsonStyle is one encoder's choices for what it escapes beyond '"', '\' and control characters.
type jsonStyle struct {
	ascii bool // non-ASCII as \uXXXX (surrogate pairs above the BMP)
	html  bool // <, >, &, U+2028 and U+2029 as \uXXXX
	slash bool // "/" as "\/"
}

func (o jsonStyle) escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20, o.html && (r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029'):
			fmt.Fprintf(&b, `\u%04x`, r)
		case o.slash && r == '/':
			b.WriteString(`\/`)
		case o.ascii && r > 0x7e && r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		case o.ascii && r >= 0x10000:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// quoteBody is strconv.Quote(s) without its quotes.
func quoteBody(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// Cut markers: where codellm shortened a capture or a message, a secret may be split, and what is left
// of it on either side is not the whole secret. "…" marks a cut on either side of it (the error message's
// stderr tail starts with one, a bad_output snippet ends with one, after its closing quote); the stderr
// capture's drop line marks a cut after it.
const (
	ellipsis   = "…"
	dropMarker = " bytes of stderr dropped]\n"
)

// redact replaces every spelling in text, then what a cut left of one at each cut marker (and at the end
// of text when cutAtEnd).
func redact(text string, forms []string, cutAtEnd bool) string {
	for _, f := range forms {
		text = strings.ReplaceAll(text, f, Redacted)
	}
	var cuts []span
	for _, at := range markers(text, ellipsis) {
		cuts = append(cuts, leftOf(text, strings.TrimSuffix(text[:at], `"`), forms))
		cuts = append(cuts, rightOf(text, at+len(ellipsis), forms))
	}
	for _, at := range markers(text, dropMarker) {
		cuts = append(cuts, rightOf(text, at+len(dropMarker), forms))
	}
	if cutAtEnd {
		cuts = append(cuts, leftOf(text, text, forms))
	}
	return replaceSpans(text, cuts)
}

// span is text[from:to] to replace with Redacted; empty when from == to.
type span struct{ from, to int }

func markers(text, m string) []int {
	var at []int
	for i := 0; ; {
		j := strings.Index(text[i:], m)
		if j < 0 {
			return at
		}
		at = append(at, i+j)
		i += j + len(m)
	}
}

// leftOf is the longest proper prefix of a spelling that before (a prefix of text) ends with: a secret
// whose end a cut removed.
func leftOf(text, before string, forms []string) span {
	best := 0
	for _, f := range forms {
		for k := min(len(f)-1, len(before)); k > best; k-- {
			if strings.HasSuffix(before, f[:k]) {
				best = k
				break
			}
		}
	}
	return span{len(before) - best, len(before)}
}

// rightOf is the longest proper suffix of a spelling that text starts with at from: a secret whose start
// a cut removed.
func rightOf(text string, from int, forms []string) span {
	rest, best := text[from:], 0
	for _, f := range forms {
		for k := min(len(f)-1, len(rest)); k > best; k-- {
			if strings.HasPrefix(rest, f[len(f)-k:]) {
				best = k
				break
			}
		}
	}
	return span{from, from + best}
}

// replaceSpans replaces each non-empty span (they do not overlap: each lies beside its own marker) with
// Redacted.
func replaceSpans(text string, cuts []span) string {
	cuts = slices.DeleteFunc(cuts, func(c span) bool { return c.from == c.to })
	if len(cuts) == 0 {
		return text
	}
	slices.SortFunc(cuts, func(a, b span) int { return a.from - b.from })
	var b strings.Builder
	last := 0
	for _, c := range cuts {
		if c.from < last {
			continue
		}
		b.WriteString(text[last:c.from])
		b.WriteString(Redacted)
		last = c.to
	}
	b.WriteString(text[last:])
	return b.String()
}
