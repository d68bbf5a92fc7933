package workspace

import (
	"strings"
	"unicode/utf8"

	"github.com/codellm/codellm/internal/wire"
)

// maxPathUnits is the §9.1 limit on a portable path, in UTF-16 code units.
const maxPathUnits = 4096

// cleanPath validates a §9.1 portable path and returns its normal form: segments joined by "/", with "." and
// empty segments removed. The root itself normalises to "". Everything that could name a place outside the
// root by syntax alone (absolute, drive-letter, backslash, "..", NUL) is refused here, before any filesystem
// access; what the filesystem could do (symlinks, races) is the resolver's job.
func cleanPath(p string) (string, error) {
	if p == "" {
		return "", newErr(CodeInvalidPath, "path must not be empty")
	}
	if !utf8.ValidString(p) {
		return "", newErr(CodeInvalidPath, "path is not valid Unicode")
	}
	if wire.UTF16Len(p) > maxPathUnits {
		return "", newErr(CodeInvalidPath, "path is longer than 4096 UTF-16 units")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", newErr(CodeInvalidPath, "path contains NUL")
	}
	if strings.HasPrefix(p, "/") {
		return "", newErr(CodeInvalidPath, "path must be relative to the workspace root")
	}
	if strings.IndexByte(p, '\\') >= 0 {
		return "", newErr(CodeInvalidPath, "path must use / as separator")
	}
	if len(p) >= 2 && p[1] == ':' && (p[0] >= 'A' && p[0] <= 'Z' || p[0] >= 'a' && p[0] <= 'z') {
		return "", newErr(CodeInvalidPath, "path must not start with a drive letter")
	}
	segs := strings.Split(p, "/")
	out := segs[:0]
	for _, s := range segs {
		switch s {
		case "", ".":
			continue
		case "..":
			return "", newErr(CodeInvalidPath, "path must not contain a .. segment")
		}
		out = append(out, s)
	}
	return strings.Join(out, "/"), nil
}

// displayPath is how a normalised path appears in messages: the root is ".".
func displayPath(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// comparePaths orders paths as §9.5 requires: segment by segment, each segment compared as UTF-8 bytes (so a
// prefix sorts first); when all shared segments are equal, fewer segments sort first. Hence
// a/b/c < a/b.txt < a/c.
func comparePaths(a, b string) int {
	for {
		as, arest, amore := strings.Cut(a, "/")
		bs, brest, bmore := strings.Cut(b, "/")
		if c := strings.Compare(as, bs); c != 0 {
			return c
		}
		switch {
		case !amore && !bmore:
			return 0
		case !amore:
			return -1
		case !bmore:
			return 1
		}
		a, b = arest, brest
	}
}

// within reports whether p is base or lies beneath it (both normalised; "" is the root).
func within(p, base string) bool {
	return base == "" || p == base || strings.HasPrefix(p, base+"/")
}
