package workspace

import (
	"unicode/utf16"
	"unicode/utf8"
)

// decoder turns a file's raw bytes into UTF-8 text as §9.1 prescribes, incrementally so that large files are
// never held whole: a BOM FF FE / FE FF selects UTF-16LE/BE, a leading EF BB BF is dropped, anything else is
// UTF-8 with each maximal ill-formed subsequence replaced by one U+FFFD (the WHATWG/Unicode "maximal subpart"
// rule, which is what JavaScript's TextDecoder does and which Go's own replacement rules do not follow).
type decoder struct {
	started bool
	utf16   bool
	bigEnd  bool
	hasBOM  bool // a UTF-8 BOM was removed
	pending []byte
	hi      uint16 // pending UTF-16 high surrogate, or 0
}

const replacement = "\uFFFD"

// write decodes p (appending to dst) and returns dst. Bytes that might belong to a sequence completed by a
// later write are held back until then or until flush.
func (d *decoder) write(dst, p []byte) []byte {
	if !d.started {
		d.pending = append(d.pending, p...)
		if len(d.pending) < 3 && !(len(d.pending) >= 2 && isUTF16BOM(d.pending)) {
			return dst
		}
		d.detect()
		p, d.pending = d.pending, nil
	} else if len(d.pending) > 0 {
		p = append(d.pending, p...)
		d.pending = nil
	}
	if d.utf16 {
		return d.utf16Chunk(dst, p, false)
	}
	return d.utf8Chunk(dst, p, false)
}

// flush decodes whatever write held back, treating end of input as the end of every sequence.
func (d *decoder) flush(dst []byte) []byte {
	if !d.started {
		d.detect()
	}
	p := d.pending
	d.pending = nil
	if d.utf16 {
		return d.utf16Chunk(dst, p, true)
	}
	return d.utf8Chunk(dst, p, true)
}

func isUTF16BOM(b []byte) bool {
	return b[0] == 0xFF && b[1] == 0xFE || b[0] == 0xFE && b[1] == 0xFF
}

func (d *decoder) detect() {
	d.started = true
	b := d.pending
	switch {
	case len(b) >= 2 && isUTF16BOM(b):
		d.utf16, d.bigEnd = true, b[0] == 0xFE
		d.pending = b[2:]
	case len(b) >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF:
		d.hasBOM = true
		d.pending = b[3:]
	}
}

func (d *decoder) utf16Chunk(dst, p []byte, final bool) []byte {
	i := 0
	for ; i+1 < len(p); i += 2 {
		var u uint16
		if d.bigEnd {
			u = uint16(p[i])<<8 | uint16(p[i+1])
		} else {
			u = uint16(p[i+1])<<8 | uint16(p[i])
		}
		switch {
		case d.hi != 0 && u >= 0xDC00 && u <= 0xDFFF:
			dst = utf8.AppendRune(dst, utf16.DecodeRune(rune(d.hi), rune(u)))
			d.hi = 0
			continue
		case d.hi != 0:
			dst = append(dst, replacement...)
			d.hi = 0
		}
		switch {
		case u >= 0xD800 && u <= 0xDBFF:
			d.hi = u
		case u >= 0xDC00 && u <= 0xDFFF:
			dst = append(dst, replacement...)
		default:
			dst = utf8.AppendRune(dst, rune(u))
		}
	}
	if i < len(p) {
		if final {
			d.hi = 0
			return append(dst, replacement...)
		}
		d.pending = append(d.pending, p[i:]...)
		return dst
	}
	if final && d.hi != 0 {
		d.hi = 0
		dst = append(dst, replacement...)
	}
	return dst
}

// utf8Chunk copies valid UTF-8 and replaces each maximal subpart of an ill-formed sequence with U+FFFD.
func (d *decoder) utf8Chunk(dst, p []byte, final bool) []byte {
	i := 0
	for i < len(p) {
		c := p[i]
		if c < 0x80 {
			// Fast path for ASCII runs.
			j := i + 1
			for j < len(p) && p[j] < 0x80 {
				j++
			}
			dst = append(dst, p[i:j]...)
			i = j
			continue
		}
		need, lo, hi := utf8Lead(c)
		if need == 0 {
			dst = append(dst, replacement...)
			i++
			continue
		}
		// Consume continuation bytes while they are valid for this lead; the first byte that is not
		// ends the maximal subpart (and is not consumed).
		j := i + 1
		ok := true
		for k := 0; k < need; k++ {
			if j >= len(p) {
				if !final {
					d.pending = append(d.pending, p[i:]...)
					return dst
				}
				ok = false
				break
			}
			b := p[j]
			l, h := byte(0x80), byte(0xBF)
			if k == 0 {
				l, h = lo, hi
			}
			if b < l || b > h {
				ok = false
				break
			}
			j++
		}
		if ok {
			dst = append(dst, p[i:j]...)
		} else {
			dst = append(dst, replacement...)
		}
		i = j
	}
	return dst
}

// utf8Lead returns how many continuation bytes lead byte c needs and the valid range of the first one
// (Unicode Table 3-7); need is 0 for bytes that can never start a sequence.
func utf8Lead(c byte) (need int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 1, 0x80, 0xBF
	case c == 0xE0:
		return 2, 0xA0, 0xBF
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		return 2, 0x80, 0xBF
	case c == 0xED:
		return 2, 0x80, 0x9F
	case c == 0xF0:
		return 3, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 3, 0x80, 0xBF
	case c == 0xF4:
		return 3, 0x80, 0x8F
	}
	return 0, 0, 0
}

// decodeAll decodes a whole buffer.
func decodeAll(b []byte) []byte {
	var d decoder
	out := d.write(make([]byte, 0, len(b)), b)
	return d.flush(out)
}
