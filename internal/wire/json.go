package wire

import "bytes"

// JSONKind names the kind of a JSON value as messages name it: object, array, string, boolean, null,
// number, or nothing (empty input). It looks at the first byte only; the value is not validated.
func JSONKind(raw []byte) string {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return "nothing"
	}
	switch trimmed[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}
