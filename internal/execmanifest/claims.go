package execmanifest

import (
	"math"
	"slices"
	"unicode/utf16"

	"github.com/codellm/codellm/internal/bridge"
)

// claimsOf checks the payload's shape as the Code API does (every required member present with its
// type, strings non-empty, version 1) and returns the claims.
func claimsOf(o *bridge.Object) (*Claims, *Error) {
	str := func(k string) (string, *Error) {
		v, _ := o.Get(k)
		s, ok := v.(string)
		if !ok || s == "" {
			return "", fail(ReasonMalformed, "Execution manifest "+k+" is invalid")
		}
		return s, nil
	}
	num := func(k string) (float64, *Error) {
		v, _ := o.Get(k)
		f, ok := v.(float64)
		if !ok || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, fail(ReasonMalformed, "Execution manifest "+k+" is invalid")
		}
		return f, nil
	}
	c := &Claims{Raw: o}
	var e *Error
	for _, f := range []struct {
		key string
		dst *string
	}{{"exec_id", &c.ExecID}, {"tenant_id", &c.TenantID}, {"user_id", &c.UserID},
		{"session_key", &c.SessionKey}, {"output_session_id", &c.OutputSessionID}} {
		if *f.dst, e = str(f.key); e != nil {
			return nil, e
		}
	}
	var n [5]float64
	for i, k := range []string{"max_upload_bytes", "max_output_files", "max_requests", "iat", "exp"} {
		if n[i], e = num(k); e != nil {
			return nil, e
		}
	}
	c.MaxUploadBytes, c.MaxOutputFiles, c.MaxRequests = int64(n[0]), int(n[1]), int(n[2])
	c.IssuedAt, c.Expires = seconds(n[3]), seconds(n[4])
	if v, _ := o.Get("v"); v != float64(Version) {
		return nil, fail(ReasonMalformed, "Execution manifest version is unsupported")
	}
	if c.InputFiles, e = inputFilesOf(o); e != nil {
		return nil, e
	}
	if c.ReadSessions, e = readSessionsOf(o); e != nil {
		return nil, e
	}
	if v, ok := o.Get("execute_body_sha256"); ok {
		s, isStr := v.(string)
		if !isStr || s == "" {
			return nil, fail(ReasonMalformed, "Execution manifest execute_body_sha256 is invalid")
		}
		c.BodySHA256 = s
	}
	if v, ok := o.Get("tool_call_socket"); ok {
		if _, isBool := v.(bool); !isBool {
			return nil, fail(ReasonMalformed, "Execution manifest tool_call_socket is invalid")
		}
	}
	return c, nil
}

func inputFilesOf(o *bridge.Object) ([]InputFile, *Error) {
	v, _ := o.Get("input_files")
	arr, ok := v.([]any)
	if !ok {
		return nil, fail(ReasonMalformed, "Execution manifest input_files must be an array")
	}
	files := make([]InputFile, 0, len(arr))
	for _, e := range arr {
		fo, _ := e.(*bridge.Object)
		id, _ := getString(fo, "id")
		sid, _ := getString(fo, "session_id")
		name, _ := getString(fo, "name")
		if fo == nil || id == "" || sid == "" || name == "" {
			return nil, fail(ReasonMalformed, "Execution manifest input_files contains an invalid file")
		}
		files = append(files, InputFile{ID: id, SessionID: sid, Name: name})
	}
	return files, nil
}

func readSessionsOf(o *bridge.Object) ([]string, *Error) {
	v, _ := o.Get("read_sessions")
	arr, ok := v.([]any)
	if !ok {
		return nil, fail(ReasonMalformed, "Execution manifest read_sessions is invalid")
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok || s == "" {
			return nil, fail(ReasonMalformed, "Execution manifest read_sessions is invalid")
		}
		out = append(out, s)
	}
	return out, nil
}

func getString(o *bridge.Object, k string) (string, bool) {
	v, ok := o.Get(k)
	s, isStr := v.(string)
	return s, ok && isStr
}

// SortedCanonical is the manifest's canonical JSON of a tree: JSON.stringify's scalars, no whitespace,
// and every object's keys in JavaScript's default sort order (UTF-16 code units), which is what the Code
// API signs and what it hashes a request body with.
func SortedCanonical(v any) ([]byte, error) {
	return appendSorted(nil, v)
}

func appendSorted(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendSorted(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case *bridge.Object:
		if x == nil {
			return append(b, "null"...), nil
		}
		members := slices.Clone(x.Members)
		slices.SortStableFunc(members, func(p, q bridge.Member) int { return compareUTF16(p.Key, q.Key) })
		b = append(b, '{')
		for i, m := range members {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = bridge.AppendCanonical(b, m.Key); err != nil {
				return nil, err
			}
			b = append(b, ':')
			if b, err = appendSorted(b, m.Value); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return bridge.AppendCanonical(b, v)
}

// compareUTF16 orders strings as JavaScript's Array.prototype.sort does without a comparator: by UTF-16
// code units, which differs from Go's byte order once a key holds characters beyond U+FFFF.
func compareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}
