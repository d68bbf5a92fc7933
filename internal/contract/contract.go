// Package contract turns the last block's stdout into the tool calls codellm replies with: it parses
// fleet's output contract (openai-contract.md §9), renders the write_note / patch_note / finish calls
// (§10.1) and checks them against the tools a request offered (§10.2).
package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// GuardAnswer is the re-execution guard's reply text (§2.5) when the conversation holds no finish answer
// to repeat.
const GuardAnswer = "codellm: run already completed; nothing was executed again"

// Tool names codellm emits. fleet maps exactly these names; anything else would be denied silently.
const (
	ToolWriteNote = "write_note"
	ToolPatchNote = "patch_note"
	ToolFinish    = "finish"
)

// ErrBadOutput is the sentinel every *BadOutputError matches with errors.Is.
var ErrBadOutput = errors.New("bad output")

// ErrMissingTool is the sentinel every *MissingToolError matches with errors.Is.
var ErrMissingTool = errors.New("missing tool")

// BadOutputError says why the last block's stdout does not satisfy the output contract. It maps to
// 422 bad_output.
type BadOutputError struct {
	// Change is the 0-based index of the offending change, or -1 when the problem is not in a change.
	Change int
	// Reason is the message without the "bad output: " prefix.
	Reason string
}

func (e *BadOutputError) Error() string { return "bad output: " + e.Reason }

// Is lets callers match any BadOutputError against ErrBadOutput.
func (e *BadOutputError) Is(target error) bool { return target == ErrBadOutput }

// MissingToolError says that the reply needs a tool the request did not offer. It maps to 422
// missing_tool.
type MissingToolError struct {
	Tool    string   // the tool codellm needs
	Offered []string // the names the request offered, in request order
}

func (e *MissingToolError) Error() string {
	return fmt.Sprintf("the role needs tool %q but the request's tools do not offer it (offered: %s)",
		e.Tool, strings.Join(e.Offered, ", "))
}

// Is lets callers match any MissingToolError against ErrMissingTool.
func (e *MissingToolError) Is(target error) bool { return target == ErrMissingTool }

// Change is one entry of "changes". Patch is true when Find or Replace is non-empty; Content is then
// ignored (fleet's rule) and kept only for diagnostics.
type Change struct {
	Path, Content, Find, Replace string
	Patch                        bool
}

// Output is the parsed output contract.
type Output struct {
	Changes []Change
	Answer  string
}

// snippetLen bounds how much of a bad stdout an error quotes: enough to recognise a stray print, small
// enough that an error never carries a whole note.
const snippetLen = 200

// Parse parses the last block's stdout (§9). Every error is a *BadOutputError.
func Parse(stdout []byte) (*Output, error) {
	raw, err := singleValue(stdout)
	if err != nil {
		return nil, err
	}
	if isNull(raw) { // fleet accepted null as {}
		return &Output{}, nil
	}
	top, err := object(raw)
	if err != nil {
		return nil, &BadOutputError{Change: -1, Reason: "stdout must be a JSON object, got " + kind(raw)}
	}
	out := &Output{}
	if v, ok := top["answer"]; ok {
		s, ok := stringOrNull(v)
		if !ok {
			return nil, &BadOutputError{Change: -1, Reason: "answer must be a string or null, got " + kind(v)}
		}
		out.Answer = s
	}
	rawChanges, ok := top["changes"]
	if !ok || isNull(rawChanges) {
		return out, nil
	}
	var list []json.RawMessage
	if trimmed := bytes.TrimSpace(rawChanges); len(trimmed) == 0 || trimmed[0] != '[' ||
		json.Unmarshal(rawChanges, &list) != nil {
		return nil, &BadOutputError{Change: -1, Reason: "changes must be an array or null, got " + kind(rawChanges)}
	}
	out.Changes = make([]Change, 0, len(list))
	for i, item := range list {
		c, err := parseChange(i, item)
		if err != nil {
			return nil, err
		}
		out.Changes = append(out.Changes, c)
	}
	return out, nil
}

// singleValue checks that stdout is exactly one JSON value with optional surrounding whitespace and
// returns it.
func singleValue(stdout []byte) (json.RawMessage, error) {
	fail := func(why string) error {
		return &BadOutputError{Change: -1, Reason: fmt.Sprintf("stdout is not a single JSON value: %s (got: %s)",
			why, quoteSnippet(stdout))}
	}
	if len(bytes.TrimSpace(stdout)) == 0 {
		return nil, fail("stdout is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(stdout))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fail(err.Error())
	}
	rest := stdout[dec.InputOffset():]
	if trimmed := bytes.TrimLeft(rest, " \t\r\n"); len(trimmed) > 0 {
		return nil, fail(fmt.Sprintf("unexpected data after the value at offset %d", len(stdout)-len(trimmed)))
	}
	return raw, nil
}

// quoteSnippet quotes the first snippetLen bytes of b, cut on a rune boundary so the quote stays
// readable.
func quoteSnippet(b []byte) string {
	if len(b) <= snippetLen {
		return strconv.Quote(string(b))
	}
	cut := snippetLen
	for cut > snippetLen-utf8.UTFMax && cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strconv.Quote(string(b[:cut])) + "…"
}

func parseChange(i int, item json.RawMessage) (Change, error) {
	bad := func(format string, args ...any) error {
		return &BadOutputError{Change: i, Reason: fmt.Sprintf("change[%d]: ", i) + fmt.Sprintf(format, args...)}
	}
	fields, err := object(item)
	if err != nil {
		return Change{}, bad("must be an object, got %s", kind(item))
	}
	var c Change
	// Keys are looked up exactly: encoding/json's case-insensitive struct matching would let "Path"
	// stand in for "path", which fleet's contract does not allow.
	for _, f := range []struct {
		key string
		dst *string
	}{{"path", &c.Path}, {"content", &c.Content}, {"find", &c.Find}, {"replace", &c.Replace}} {
		v, ok := fields[f.key]
		if !ok {
			continue
		}
		s, ok := stringOrNull(v)
		if !ok {
			return Change{}, bad("%s must be a string or null, got %s", f.key, kind(v))
		}
		*f.dst = s
	}
	if c.Path == "" {
		return Change{}, bad("missing path")
	}
	if !validPath(c.Path) {
		return Change{}, bad("invalid path %q: must be a relative slash path without \"..\"", c.Path)
	}
	c.Patch = c.Find != "" || c.Replace != ""
	return c, nil
}

// validPath enforces codellm's only path rule (§9): relative, slash-separated, no NUL, no ".." segment.
// Slash-separated excludes Windows forms, which a client on Windows would resolve outside its root: no
// backslash anywhere ("C:\x", "..\x") and no drive prefix ("C:x", "c:/x").
// Everything else — scope, normalisation — is the client's job, so the path is forwarded verbatim.
func validPath(p string) bool {
	if strings.IndexByte(p, 0) >= 0 || strings.HasPrefix(p, "/") || strings.IndexByte(p, '\\') >= 0 || hasDrive(p) {
		return false
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return false
		}
	}
	return true
}

// hasDrive reports a Windows drive prefix: one ASCII letter and a colon.
func hasDrive(p string) bool {
	return len(p) >= 2 && p[1] == ':' && ('a' <= p[0]|0x20 && p[0]|0x20 <= 'z')
}

func object(raw json.RawMessage) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, errors.New("not an object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// stringOrNull decodes a JSON string; null yields "" (null means absent in fleet's contract). ok is
// false for any other type.
func stringOrNull(raw json.RawMessage) (s string, ok bool) {
	trimmed := bytes.TrimSpace(raw)
	if isNull(trimmed) {
		return "", true
	}
	if len(trimmed) == 0 || trimmed[0] != '"' {
		return "", false
	}
	if err := json.Unmarshal(trimmed, &s); err != nil {
		return "", false
	}
	return s, true
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func kind(raw []byte) string { return JSONKind(raw) }

// JSONKind names a JSON value's type for error messages ("object", "array", "string", "boolean", "null",
// "number", or "nothing" for empty input). internal/openai uses it too, so both name types alike.
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
