package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The canonical JSON form (spec §4.3) is what ECMAScript JSON.stringify
// writes for JSON.parse(text). Both sides of the bridge sign and compare
// these bytes, so this file is the only place that produces them.
//
// Decoded JSON is represented by a small tree of Go values:
//
//	*Object  ordered object (insertion order kept, duplicates folded)
//	[]any    array
//	string   string (WTF-8: a lone surrogate is kept as its 3-byte form)
//	float64  number
//	bool     true / false
//	nil      null
//
// Go maps are never used, because they lose the member order the peer saw.

// Member is one key/value pair of an Object.
type Member struct {
	Key   string
	Value any
}

// Object is a JSON object that remembers insertion order.
type Object struct {
	Members []Member
}

// Get returns the value stored under key.
func (o *Object) Get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	for _, m := range o.Members {
		if m.Key == key {
			return m.Value, true
		}
	}
	return nil, false
}

// Set replaces the value of an existing key in place (keeping its position,
// as JavaScript does for duplicates) or appends a new member.
func (o *Object) Set(key string, v any) {
	for i := range o.Members {
		if o.Members[i].Key == key {
			o.Members[i].Value = v
			return
		}
	}
	o.Members = append(o.Members, Member{Key: key, Value: v})
}

// Delete removes key if present.
func (o *Object) Delete(key string) {
	for i := range o.Members {
		if o.Members[i].Key == key {
			o.Members = append(o.Members[:i], o.Members[i+1:]...)
			return
		}
	}
}

// Len is the number of members.
func (o *Object) Len() int {
	if o == nil {
		return 0
	}
	return len(o.Members)
}

// ErrInvalidJSON is wrapped by every decoding failure.
var ErrInvalidJSON = errors.New("bridge: invalid JSON")

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

// Parse decodes one JSON text into the ordered tree. Input that is not valid
// UTF-8 is rejected (spec §15); escaped lone surrogates are kept (§4.3 rule 7).
func Parse(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: body is not valid UTF-8", ErrInvalidJSON)
	}
	p := parser{data: data}
	p.skipWS()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipWS()
	if p.pos != len(p.data) {
		return nil, p.errf("unexpected data after top-level value")
	}
	return v, nil
}

// ParseObject decodes data and requires a top-level object.
func ParseObject(data []byte) (*Object, error) {
	v, err := Parse(data)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*Object)
	if !ok {
		return nil, fmt.Errorf("%w: top-level value is not an object", ErrInvalidJSON)
	}
	return o, nil
}

type parser struct {
	data []byte
	pos  int
}

func (p *parser) errf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", ErrInvalidJSON, p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) skipWS() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, p.errf("nesting deeper than %d", maxDepth)
	}
	if p.pos >= len(p.data) {
		return nil, p.errf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.errf("unexpected character %q", c)
	}
}

func (p *parser) literal(lit string) error {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(lit)) {
		return p.errf("invalid literal")
	}
	p.pos += len(lit)
	return nil
}

func (p *parser) object(depth int) (any, error) {
	p.pos++ // '{'
	o := &Object{}
	var index map[string]int
	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return o, nil
	}
	for {
		p.skipWS()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.errf("expected object key")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.skipWS()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errf("expected ':'")
		}
		p.pos++
		p.skipWS()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		// Duplicate keys: the last value wins at the first key's position.
		if index == nil {
			index = make(map[string]int)
		}
		if i, dup := index[k]; dup {
			o.Members[i].Value = v
		} else {
			index[k] = len(o.Members)
			o.Members = append(o.Members, Member{Key: k, Value: v})
		}
		p.skipWS()
		if p.pos >= len(p.data) {
			return nil, p.errf("unterminated object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return o, nil
		default:
			return nil, p.errf("expected ',' or '}'")
		}
	}
}

func (p *parser) array(depth int) (any, error) {
	p.pos++ // '['
	arr := []any{}
	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return arr, nil
	}
	for {
		p.skipWS()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.skipWS()
		if p.pos >= len(p.data) {
			return nil, p.errf("unterminated array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return arr, nil
		default:
			return nil, p.errf("expected ',' or ']'")
		}
	}
}

func hexVal(c byte) (rune, bool) {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0'), true
	case c >= 'a' && c <= 'f':
		return rune(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return rune(c-'A') + 10, true
	}
	return 0, false
}

func (p *parser) hex4() (rune, error) {
	if p.pos+4 > len(p.data) {
		return 0, p.errf("short \\u escape")
	}
	var r rune
	for i := 0; i < 4; i++ {
		h, ok := hexVal(p.data[p.pos+i])
		if !ok {
			return 0, p.errf("bad \\u escape")
		}
		r = r<<4 | h
	}
	p.pos += 4
	return r, nil
}

// appendWTF8 writes r as UTF-8, or a surrogate as its generalized 3-byte form.
func appendWTF8(b []byte, r rune) []byte {
	if r >= 0xD800 && r <= 0xDFFF {
		return append(b, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
	return utf8.AppendRune(b, r)
}

func (p *parser) str() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := string(p.data[start:p.pos])
			p.pos++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errf("control character in string")
		}
		p.pos++
	}
	buf := append([]byte(nil), p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", p.errf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		p.pos++
		if p.pos >= len(p.data) {
			break
		}
		e := p.data[p.pos]
		p.pos++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if r >= 0xD800 && r < 0xDC00 && p.pos+6 <= len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
				save := p.pos
				p.pos += 2
				r2, err := p.hex4()
				if err == nil && r2 >= 0xDC00 && r2 <= 0xDFFF {
					buf = utf8.AppendRune(buf, utf16.DecodeRune(r, r2))
					continue
				}
				p.pos = save
			}
			buf = appendWTF8(buf, r)
		default:
			return "", p.errf("bad escape \\%c", e)
		}
	}
	return "", p.errf("unterminated string")
}

func (p *parser) number() (any, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.pos < len(p.data) && p.data[p.pos] == '0' {
		p.pos++
	} else if digits() == 0 {
		return nil, p.errf("bad number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return nil, p.errf("bad fraction")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return nil, p.errf("bad exponent")
		}
	}
	f, err := strconv.ParseFloat(string(p.data[start:p.pos]), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.errf("bad number")
	}
	// Out of range gives ±Inf (written back as null), as JavaScript does.
	return f, nil
}

// ErrUnsupportedValue is returned when a tree contains a Go value that has no
// JSON form.
var ErrUnsupportedValue = errors.New("bridge: value cannot be encoded as canonical JSON")

// AppendCanonical appends the canonical encoding of v to b.
func AppendCanonical(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if x {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case string:
		return appendString(b, x), nil
	case float64:
		return AppendNumber(b, x), nil
	case int:
		return AppendNumber(b, float64(x)), nil
	case int64:
		return AppendNumber(b, float64(x)), nil
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = AppendCanonical(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case *Object:
		if x == nil {
			return append(b, "null"...), nil
		}
		return appendObject(b, x)
	case Object:
		return appendObject(b, &x)
	default:
		return nil, fmt.Errorf("%w: %T", ErrUnsupportedValue, v)
	}
}

// Canonical returns the canonical encoding of a tree value.
func Canonical(v any) ([]byte, error) {
	return AppendCanonical(nil, v)
}

// Canonicalize parses JSON text and re-serialises it canonically: the
// equivalent of JSON.stringify(JSON.parse(text)).
func Canonicalize(text []byte) ([]byte, error) {
	v, err := Parse(text)
	if err != nil {
		return nil, err
	}
	return Canonical(v)
}

// Marshal encodes a Go value (typically a protocol struct) canonically. The
// struct is first rendered by encoding/json only to obtain its field order and
// field names; the result is then re-parsed, and the emitted bytes come from
// the canonical encoder alone. Opaque fields use Raw, which carries its own
// ordered tree through this round trip unchanged.
func Marshal(v any) ([]byte, error) {
	switch v.(type) {
	case *Object, Object, []any:
		return Canonical(v)
	}
	tmp, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return Canonicalize(tmp)
}

// isArrayIndex reports whether key is an ECMAScript array index, which
// JSON.stringify emits before all other keys in ascending numeric order.
func isArrayIndex(key string) (uint64, bool) {
	if key == "0" {
		return 0, true
	}
	if key == "" || len(key) > 10 || key[0] < '1' || key[0] > '9' {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if n > 4294967294 {
		return 0, false
	}
	return n, true
}

func appendObject(b []byte, o *Object) ([]byte, error) {
	b = append(b, '{')
	type idx struct {
		n uint64
		i int
	}
	var ints []idx
	for i, m := range o.Members {
		if n, ok := isArrayIndex(m.Key); ok {
			ints = append(ints, idx{n, i})
		}
	}
	// Insertion sort: integer keys are rare and few.
	for i := 1; i < len(ints); i++ {
		for j := i; j > 0 && ints[j].n < ints[j-1].n; j-- {
			ints[j], ints[j-1] = ints[j-1], ints[j]
		}
	}
	first := true
	var err error
	emit := func(m Member) {
		if err != nil {
			return
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, m.Key)
		b = append(b, ':')
		b, err = AppendCanonical(b, m.Value)
	}
	// Duplicate keys can only come from hand-built objects; emit each key once
	// (last value, first position) so the encoder never writes duplicates.
	seen := make(map[string]int, len(o.Members))
	for i, m := range o.Members {
		seen[m.Key] = i
	}
	for _, e := range ints {
		m := o.Members[e.i]
		if last := seen[m.Key]; last >= 0 {
			emit(Member{m.Key, o.Members[last].Value})
			seen[m.Key] = -1
		}
	}
	for _, m := range o.Members {
		if _, ok := isArrayIndex(m.Key); ok {
			continue
		}
		if last := seen[m.Key]; last >= 0 {
			emit(Member{m.Key, o.Members[last].Value})
			seen[m.Key] = -1
		}
	}
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

const lowerHex = "0123456789abcdef"

func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b = append(b, '\\', '"')
			case '\\':
				b = append(b, '\\', '\\')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				if c < 0x20 {
					b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xF])
				} else {
					b = append(b, c)
				}
			}
			i++
			continue
		}
		// A WTF-8 surrogate (ED A0..BF xx) is a lone surrogate kept by the
		// decoder; JSON.stringify writes it as a lowercase \udxxx escape.
		if c == 0xED && i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF && s[i+2]&0xC0 == 0x80 {
			r := rune(c&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F)
			b = append(b, '\\', 'u', lowerHex[r>>12&0xF], lowerHex[r>>8&0xF], lowerHex[r>>4&0xF], lowerHex[r&0xF])
			i += 3
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			// Not reachable for decoded input (validated as UTF-8); for
			// hand-built strings write U+FFFD as JavaScript strings would
			// hold after a lossy decode.
			b = utf8.AppendRune(b, utf8.RuneError)
			i++
			continue
		}
		b = append(b, s[i:i+size]...)
		i += size
	}
	return append(b, '"')
}

// AppendNumber appends f formatted as ECMAScript Number::toString does.
func AppendNumber(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	if f == 0 {
		return append(b, '0') // also -0
	}
	if f < 0 {
		b = append(b, '-')
		f = -f
	}
	// Shortest round-trip digits and decimal exponent: f = 0.DIGITS × 10^n.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expPart, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(expPart)
	n := x + 1
	k := len(digits)
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for i := 0; i < n-k; i++ {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for i := 0; i < -n; i++ {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		} else {
			b = append(b, '-')
		}
		ex := n - 1
		if ex < 0 {
			ex = -ex
		}
		b = strconv.AppendInt(b, int64(ex), 10)
	}
	return b
}

// Raw is an opaque JSON value (a runner request body, its headers, a runner
// reply) carried through protocol structs without ever passing through a Go
// map. It decodes with the order-preserving parser and encodes canonically.
type Raw struct {
	Value any
	set   bool
}

// NewRaw wraps a tree value.
func NewRaw(v any) Raw { return Raw{Value: v, set: true} }

// RawFromJSON parses text into a Raw.
func RawFromJSON(text []byte) (Raw, error) {
	v, err := Parse(text)
	if err != nil {
		return Raw{}, err
	}
	return NewRaw(v), nil
}

// IsSet reports whether the value was present (JSON null counts as present).
func (r Raw) IsSet() bool { return r.set }

// Object returns the value as an ordered object, or nil.
func (r Raw) Object() *Object {
	o, _ := r.Value.(*Object)
	return o
}

// Canonical returns the canonical bytes of the value.
func (r Raw) Canonical() ([]byte, error) { return Canonical(r.Value) }

// MarshalJSON implements json.Marshaler.
func (r Raw) MarshalJSON() ([]byte, error) { return Canonical(r.Value) }

// UnmarshalJSON implements json.Unmarshaler with the order-preserving parser.
func (r *Raw) UnmarshalJSON(data []byte) error {
	v, err := Parse(data)
	if err != nil {
		return err
	}
	r.Value, r.set = v, true
	return nil
}

// IsZero lets `omitzero` drop an absent Raw field.
func (r Raw) IsZero() bool { return !r.set }
