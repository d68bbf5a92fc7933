package wire

import (
	"path"
	"strings"
	"unicode/utf8"
)

// CheckFileName is the rule for a file name a client sends: a runner API file, a hub upload, a file
// reference. The name must be a relative, clean, slash-separated path of printable UTF-8 (no control
// character, no backslash), at most 1024 bytes in all and 255 per component, that stays inside the
// directory it is written to. It returns "" or what is wrong, worded to follow the name in a message;
// a surface adds its own rules (the runner's reserved scratch directory, the file store's depth).
func CheckFileName(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > 1024:
		return "is longer than 1024 bytes"
	case !utf8.ValidString(name):
		return "is not valid UTF-8"
	case strings.ContainsFunc(name, func(c rune) bool { return c < ' ' || c == 0x7f || c == '\\' }):
		return "contains a control character or a backslash"
	case strings.HasPrefix(name, "/"):
		return "must be relative"
	case name == ".." || strings.HasPrefix(name, "../"):
		return "escapes the workspace"
	case name == "." || path.Clean(name) != name:
		return `must be a clean path (no empty, "." or ".." components)`
	}
	for _, c := range strings.Split(name, "/") {
		if len(c) > 255 {
			return "has a component longer than 255 bytes"
		}
	}
	return ""
}
