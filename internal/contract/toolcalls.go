package contract

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
)

// ToolCall is one assistant tool call. Arguments is compact JSON with keys in the order of §10.1 and no
// HTML escaping, so a note containing "<" or "&" reaches fleet byte for byte.
type ToolCall struct {
	ID, Name, Arguments string
}

// The argument objects, declared so encoding/json emits keys in spec order and every key even when
// empty (§10.1).
type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

type patchArgs struct {
	Path    string `json:"path"`
	Find    string `json:"find"`
	Replace string `json:"replace"`
}

type finishArgs struct {
	Answer string `json:"answer"`
}

// ToolCalls renders the reply's calls: one write_note or patch_note per change in change order, then
// exactly one finish, always — fleet stops at finish, and without it fleet would call again and
// re-apply every write (§2.5). Ids are call_0, call_1, … so change[i] becomes call_i.
func (o *Output) ToolCalls() []ToolCall {
	calls := make([]ToolCall, 0, len(o.Changes)+1)
	for _, c := range o.Changes {
		if c.Patch {
			calls = append(calls, ToolCall{Name: ToolPatchNote,
				Arguments: compact(patchArgs{Path: c.Path, Find: c.Find, Replace: c.Replace})})
		} else {
			calls = append(calls, ToolCall{Name: ToolWriteNote,
				Arguments: compact(writeArgs{Path: c.Path, Content: c.Content})})
		}
	}
	calls = append(calls, FinishCall(o.Answer))
	for i := range calls {
		calls[i].ID = "call_" + strconv.Itoa(i)
	}
	return calls
}

// FinishCall is a lone finish call with id call_0, e.g. the re-execution guard's reply (§2.5) to a
// request whose tool_choice requires a call.
func FinishCall(answer string) ToolCall {
	return ToolCall{ID: "call_0", Name: ToolFinish, Arguments: compact(finishArgs{Answer: answer})}
}

// compact encodes v without HTML escaping. The argument structs hold only strings, so encoding cannot
// fail; a failure would be a programming error and panics rather than emit a corrupt call.
func compact(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("contract: encoding tool arguments: " + err.Error())
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// RequireFinish is the tool-list check made before running (§10.2): when the request offered tools,
// finish must be among them. offered == nil means the request sent no tools (absent, null or empty) and
// nothing is checked; a non-nil empty slice means tools were sent but none named a function, which
// fails.
func RequireFinish(offered []string) error {
	if offered == nil || slices.Contains(offered, ToolFinish) {
		return nil
	}
	return &MissingToolError{Tool: ToolFinish, Offered: slices.Clone(offered)}
}

// CheckTools is the tool-list check made after running (§10.2): every tool the reply will call must
// have been offered. It reports the first missing tool in call order (finish is checked first because
// the reply always ends with it).
func CheckTools(offered []string, o *Output) error {
	if err := RequireFinish(offered); err != nil || offered == nil {
		return err
	}
	for _, c := range o.Changes {
		tool := ToolWriteNote
		if c.Patch {
			tool = ToolPatchNote
		}
		if !slices.Contains(offered, tool) {
			return &MissingToolError{Tool: tool, Offered: slices.Clone(offered)}
		}
	}
	return nil
}
