package wire

import (
	"unicode/utf16"
	"unicode/utf8"
)

// Abbrev cuts s to at most n bytes on a rune boundary and marks the cut with "…": a client's value quoted
// in a message.
func Abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// UTF16Len is JavaScript's String.length of s: its UTF-16 code units, the unit the bridge protocol's limits
// count (an invalid byte counts as the one U+FFFD it decodes to).
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		n += runeUnits(r)
	}
	return n
}

// ClipUTF16 cuts s to at most n UTF-16 code units without splitting a character (a surrogate pair is
// kept whole or dropped whole).
func ClipUTF16(s string, n int) string {
	units := 0
	for i, r := range s {
		w := runeUnits(r)
		if units+w > n {
			return s[:i]
		}
		units += w
	}
	return s
}

func runeUnits(r rune) int {
	if w := utf16.RuneLen(r); w > 0 {
		return w
	}
	return 1
}
