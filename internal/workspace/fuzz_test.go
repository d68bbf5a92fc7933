package workspace

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecode: decoding is chunking-independent and always yields valid UTF-8; valid UTF-8 without a BOM is
// unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "abc", "\xEF\xBB\xBFx", "\xFF\xFEa\x00", "\xFE\xFF\x00a", "a\xE2\x82b", "\xF0\x9F\x98", "é😀"} {
		f.Add([]byte(s), 1)
	}
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		whole := decodeAll(in)
		if !utf8.Valid(whole) {
			t.Fatalf("invalid UTF-8 from %q", in)
		}
		if cut < 0 {
			cut = -cut
		}
		if len(in) > 0 {
			cut %= len(in) + 1
		} else {
			cut = 0
		}
		var d decoder
		out := d.write(nil, in[:cut])
		out = d.write(out, in[cut:])
		out = d.flush(out)
		if string(out) != string(whole) {
			t.Fatalf("chunked decode differs at %d: %q vs %q", cut, out, whole)
		}
		if utf8.Valid(in) && !strings.HasPrefix(string(in), "\xEF\xBB\xBF") && !(len(in) >= 2 && isUTF16BOM(in)) &&
			string(whole) != string(in) {
			t.Fatalf("valid UTF-8 changed: %q -> %q", in, whole)
		}
	})
}

// FuzzCleanPath: an accepted path never names anything outside the root by syntax, and normalising is
// idempotent.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"a", "./a//b/", "..", "a/../b", "/x", `a\b`, "C:x", "a\x00", ".", "...", "é/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := cleanPath(p)
		if err != nil {
			return
		}
		if strings.HasPrefix(c, "/") || strings.Contains(c, "\\") || strings.Contains(c, "\x00") || strings.Contains(c, "//") {
			t.Fatalf("%q -> %q", p, c)
		}
		for _, seg := range strings.Split(c, "/") {
			if seg == ".." || seg == "." {
				t.Fatalf("%q -> %q keeps a dot segment", p, c)
			}
		}
		if c != "" {
			if again, err := cleanPath(c); err != nil || again != c {
				t.Fatalf("not idempotent: %q -> %q -> %q, %v", p, c, again, err)
			}
		}
	})
}
