package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/codellm/codellm/internal/contract"
)

// ToolChoice is a request's tool_choice as codellm honours it. codellm's answer is always tool calls
// ending with finish (or, from the re-execution guard, a final text), so: "auto" (the default) and
// "required" are honoured as they are; a forced function is honoured when it is finish (every answer
// calls it) and refused otherwise; "none" is honoured only by the guard's text — a request that would run
// is refused rather than answered with calls it forbade; allowed_tools narrows the offered tools to its
// list (the tool-list check then holds the answer to it) and may require a call. Hosted tool types
// (file_search, web_search, mcp, custom, …) are refused.
type ToolChoice struct {
	Mode     string // "auto", "none" or "required"
	Function string // the forced function's name, "" when none is forced
	// Allowed is allowed_tools' function names; nil when tool_choice is not allowed_tools.
	Allowed []string
	// Raw is tool_choice as sent (nil when absent or null; Responses requests only): the Response object
	// echoes it.
	Raw json.RawMessage
}

// Requires reports whether the answer must be a tool call ("required", a forced function, or
// allowed_tools in mode required).
func (c ToolChoice) Requires() bool { return c.Mode == "required" || c.Function != "" }

// Check refuses a tool_choice codellm cannot honour for this request (guarded: the re-execution guard
// will answer it, without running anything): 400 invalid_tool_choice naming what to send instead.
func (c ToolChoice) Check(guarded bool) *Error {
	if c.Function != "" && c.Function != contract.ToolFinish {
		return NewError(http.StatusBadRequest, "invalid_tool_choice",
			`tool_choice forces the function %q, but codellm answers with write_note/patch_note calls and always with finish: force "finish", send "auto" or leave tool_choice out`, truncate(c.Function, 64))
	}
	if c.Mode == "none" && !guarded {
		return NewError(http.StatusBadRequest, "invalid_tool_choice",
			`tool_choice "none" forbids tool calls, but codellm answers a run only with tool calls (write_note/patch_note, then finish): send "auto" or leave tool_choice out`)
	}
	return nil
}

// restrict narrows offered tools to the allowed ones (allowed_tools), so that the tool-list check
// (contract.RequireFinish, CheckTools) holds the answer to the list.
func (c ToolChoice) restrict(offered []string) []string {
	if c.Allowed == nil {
		return offered
	}
	out := []string{}
	for _, name := range c.Allowed {
		if offered == nil || slices.Contains(offered, name) {
			out = append(out, name)
		}
	}
	return out
}

func badToolChoice(format string, args ...any) *Error {
	return NewError(http.StatusBadRequest, "invalid_tool_choice", format, args...)
}

// decodeToolChoice parses tool_choice in either API's shape. chat: {"type":"function","function":{"name"}}
// and {"type":"allowed_tools","allowed_tools":{"mode","tools":[{"type":"function","function":{"name"}}]}};
// Responses: {"type":"function","name"} and {"type":"allowed_tools","mode","tools":[{"type":"function","name"}]}.
func decodeToolChoice(raw json.RawMessage, responses bool) (ToolChoice, *Error) {
	c := ToolChoice{Mode: "auto"}
	if raw == nil || isNull(raw) {
		return c, nil
	}
	if responses {
		c.Raw = raw
	}
	var s string
	if str(raw, &s) {
		if s != "auto" && s != "none" && s != "required" {
			return c, badToolChoice(`field "tool_choice" must be "auto", "none", "required" or an object, got %q`, truncate(s, 64))
		}
		c.Mode = s
		return c, nil
	}
	obj, ok := object(raw)
	if !ok {
		return c, badToolChoice(`field "tool_choice" must be a string or an object, got %s`, kind(raw))
	}
	var typ string
	str(obj["type"], &typ)
	switch typ {
	case "function":
		name, e := toolName(obj, responses, "tool_choice")
		if e != nil {
			return c, e
		}
		c.Function = name
		return c, nil
	case "allowed_tools":
		ac, e := decodeAllowedTools(obj, responses)
		ac.Raw = raw
		return ac, e
	}
	return c, badToolChoice(`field "tool_choice" has type %q: codellm offers only function tools (write_note, patch_note, finish); send "auto", "required" or a function`, truncate(typ, 64))
}

// toolName reads a function name: obj.name (Responses) or obj.function.name (chat).
func toolName(obj map[string]json.RawMessage, responses bool, field string) (string, *Error) {
	var name string
	if responses {
		if !str(obj["name"], &name) || name == "" {
			return "", badToolChoice(`field "%s.name" must be the function's name`, field)
		}
		return name, nil
	}
	fn, _ := object(obj["function"])
	if !str(fn["name"], &name) || name == "" {
		return "", badToolChoice(`field "%s.function.name" must be the function's name`, field)
	}
	return name, nil
}

func decodeAllowedTools(obj map[string]json.RawMessage, responses bool) (ToolChoice, *Error) {
	c := ToolChoice{Mode: "auto"}
	field := "tool_choice"
	if !responses {
		inner, ok := object(obj["allowed_tools"])
		if !ok {
			return c, badToolChoice(`field "tool_choice.allowed_tools" must be an object with mode and tools`)
		}
		obj, field = inner, "tool_choice.allowed_tools"
	}
	var mode string
	if !str(obj["mode"], &mode) || (mode != "auto" && mode != "required") {
		return c, badToolChoice(`field "%s.mode" must be "auto" or "required"`, field)
	}
	list, ok := array(obj["tools"])
	if !ok {
		return c, badToolChoice(`field "%s.tools" must be an array of function tools`, field)
	}
	c.Mode, c.Allowed = mode, []string{}
	for i, item := range list {
		t, _ := object(item)
		var typ string
		if str(t["type"], &typ); typ != "function" {
			return c, badToolChoice(`field "%s.tools[%d]" has type %q: codellm offers only function tools`, field, i, truncate(typ, 64))
		}
		name, e := toolName(t, responses, fmt.Sprintf("%s.tools[%d]", field, i))
		if e != nil {
			return c, e
		}
		c.Allowed = append(c.Allowed, name)
	}
	return c, nil
}
