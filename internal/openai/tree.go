package openai

import (
	"context"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/contract"
)

// ChatRequestFromTree is DecodeChatRequest over a body already parsed into bridge's ordered tree, so a
// hop that needs the tree (the hub builds the canonical assignment from it) parses the bytes once.
//
// ok is true only when the result is exactly what DecodeChatRequest returns for the same bytes. It is
// false for every body DecodeChatRequest refuses, and for the few accepted ones whose value depends on
// the number's text, which the tree no longer has (a numeric metadata.seed or metadata.now): the caller
// then decodes the bytes with DecodeChatRequest, which gives the refusal with its exact message (several
// quote the raw JSON, or come from encoding/json). A refused body costs a second parse; an accepted one
// does not. Strings are read as encoding/json reads them: an escaped lone surrogate, which the tree keeps
// (bridge §4.3), becomes U+FFFD.
func ChatRequestFromTree(top *bridge.Object) (r *ChatRequest, ok bool) {
	if top == nil {
		return nil, false
	}
	r = &ChatRequest{}
	var opts *bridge.Object
	if r.Model, ok = treeString(top, "model"); !ok {
		return nil, false
	}
	if r.Stream, ok = treeBool(top, "stream"); !ok {
		return nil, false
	}
	if opts, ok = treeObject(top, "stream_options"); !ok {
		return nil, false
	}
	if r.IncludeUsage, ok = treeBool(opts, "include_usage"); !ok {
		return nil, false
	}
	if r.Messages, ok = treeMessages(top); !ok {
		return nil, false
	}
	if r.Tools, ok = treeTools(top); !ok {
		return nil, false
	}
	if r.ToolChoice, ok = treeToolChoice(top); !ok {
		return nil, false
	}
	if r.Debug, ok = treeBool(top, "x_codellm_debug"); !ok {
		return nil, false
	}
	if !treeMetadata(top, r) {
		return nil, false
	}
	return r, true
}

// chatTreeKey carries a chat body's tree through a request context (WithChatTree).
type chatTreeKey struct{}

// WithChatTree records that the request body's bytes are tree's canonical encoding, so the chat core can
// read the request from the tree (DecodeChatRequestTree) instead of parsing the bytes again: the worker's
// in-process chat operation, whose assignment body bridge has already parsed (issue 15 item 3).
func WithChatTree(ctx context.Context, tree *bridge.Object) context.Context {
	if tree == nil {
		return ctx
	}
	return context.WithValue(ctx, chatTreeKey{}, tree)
}

// ChatTreeFrom returns the tree WithChatTree recorded, or nil.
func ChatTreeFrom(ctx context.Context) *bridge.Object {
	o, _ := ctx.Value(chatTreeKey{}).(*bridge.Object)
	return o
}

// DecodeChatRequestTree is DecodeChatRequest for a body whose tree the caller already holds (nil: none):
// the tree's request when ChatRequestFromTree gives one, else the bytes decoded (with their exact refusal).
// body must be tree's canonical bytes (or bytes that parse to tree), as the bridge guarantees.
func DecodeChatRequestTree(body []byte, tree *bridge.Object) (*ChatRequest, *Error) {
	if tree != nil {
		if r, ok := ChatRequestFromTree(tree); ok {
			return r, nil
		}
	}
	return DecodeChatRequest(body)
}

func treeMessages(top *bridge.Object) ([]Message, bool) {
	v, _ := top.Get("messages")
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, false
	}
	msgs := make([]Message, len(list))
	for i, item := range list {
		obj, ok := item.(*bridge.Object)
		if !ok {
			return nil, false
		}
		var m Message
		role, _ := obj.Get("role")
		if m.Role, ok = role.(string); !ok {
			return nil, false
		}
		m.Role = jsonString(m.Role)
		if m.Name, ok = treeString(obj, "name"); !ok {
			return nil, false
		}
		content, _ := obj.Get("content")
		if m.Text, ok = treeContent(content); !ok {
			return nil, false
		}
		if calls, present := obj.Get("tool_calls"); present && calls != nil {
			list, ok := calls.([]any)
			if !ok {
				return nil, false
			}
			m.HasToolCalls = len(list) > 0
			m.FinishAnswer = treeFinishAnswer(list)
		}
		msgs[i] = m
	}
	return msgs, true
}

// treeToolChoice is decodeToolChoice for the strings; an object (a forced function, allowed_tools) is
// left to the bytes.
func treeToolChoice(top *bridge.Object) (ToolChoice, bool) {
	v, _ := top.Get("tool_choice")
	if v == nil {
		return ToolChoice{Mode: "auto"}, true
	}
	s, _ := v.(string)
	switch s {
	case "auto", "none", "required":
		return ToolChoice{Mode: s}, true
	}
	return ToolChoice{}, false
}

// treeFinishAnswer is chatFinishAnswer on the tree.
func treeFinishAnswer(calls []any) *string {
	var answer *string
	for _, c := range calls {
		obj, _ := c.(*bridge.Object)
		if obj == nil {
			continue
		}
		fn, _ := obj.Get("function")
		fobj, _ := fn.(*bridge.Object)
		if fobj == nil {
			continue
		}
		name, _ := fobj.Get("name")
		args, _ := fobj.Get("arguments")
		if n, _ := name.(string); jsonString(n) == contract.ToolFinish {
			if a, ok := args.(string); ok {
				if v := finishArgument(jsonString(a)); v != nil {
					answer = v
				}
			}
		}
	}
	return answer
}

// treeContent is decodeContent: a string, null, or parts whose "text" parts are concatenated.
func treeContent(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return jsonString(x), true
	case []any:
		var b strings.Builder
		for _, p := range x {
			obj, ok := p.(*bridge.Object)
			if !ok {
				return "", false
			}
			t, _ := obj.Get("type")
			typ, ok := t.(string)
			if !ok {
				return "", false
			}
			if jsonString(typ) != "text" {
				continue
			}
			t, _ = obj.Get("text")
			text, ok := t.(string)
			if !ok {
				return "", false
			}
			b.WriteString(jsonString(text))
		}
		return b.String(), true
	}
	return "", false
}

// treeTools is decodeTools: absent, null or [] → nil; otherwise the non-empty function names.
func treeTools(top *bridge.Object) ([]string, bool) {
	v, _ := top.Get("tools")
	if v == nil {
		return nil, true
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	if len(list) == 0 {
		return nil, true
	}
	names := make([]string, 0, len(list))
	for _, item := range list {
		obj, ok := item.(*bridge.Object)
		if !ok {
			return nil, false
		}
		fn, ok := treeObject(obj, "function")
		if !ok {
			return nil, false
		}
		name, ok := treeString(fn, "name")
		if !ok {
			return nil, false
		}
		if name != "" {
			names = append(names, name)
		}
	}
	return names, true
}

// treeMetadata is decodeMetadata for DecodeChatRequest's metadata fields.
func treeMetadata(top *bridge.Object, r *ChatRequest) bool {
	meta, ok := treeObject(top, "metadata")
	if !ok {
		return false
	}
	if r.TimeoutSeconds, ok = treeTimeout(meta); !ok {
		return false
	}
	if v, _ := meta.Get("network_allow"); v != nil {
		s, ok := v.(string)
		if !ok {
			return false
		}
		list := []string{}
		for _, d := range strings.Split(jsonString(s), ",") {
			if d = strings.TrimSpace(d); d != "" {
				list = append(list, d)
			}
		}
		r.NetworkAllow = &list
	}
	r.Determinism, ok = treeDeterminism(meta)
	return ok
}

// treeTimeout is decodeTimeout: digits in a string, or an integral number (saturating at
// MaxTimeoutSeconds). A number too large for a float64 is refused there (ParseFloat's range error); the
// tree holds it as +Inf.
func treeTimeout(meta *bridge.Object) (int, bool) {
	v, _ := meta.Get("timeout_seconds")
	switch x := v.(type) {
	case nil:
		return 0, true
	case float64:
		if math.IsInf(x, 0) || x != math.Trunc(x) || x <= 0 {
			return 0, false
		}
		if x > MaxTimeoutSeconds {
			return MaxTimeoutSeconds, true
		}
		return int(x), true
	case string:
		digits := jsonString(x)
		if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
			return 0, false
		}
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || n > MaxTimeoutSeconds {
			return MaxTimeoutSeconds, true
		}
		return int(n), n > 0
	}
	return 0, false
}

// treeDeterminism is DecodeDeterminism for string and boolean values; a numeric seed or now depends on
// the number's text, so it is left to the byte decoder (ok false).
func treeDeterminism(meta *bridge.Object) (Determinism, bool) {
	var d Determinism
	switch v, _ := meta.Get("deterministic"); x := v.(type) {
	case nil:
	case bool:
		d.On = &x
	case string:
		switch jsonString(x) {
		case "true":
			d.On = new(bool)
			*d.On = true
		case "false":
			d.On = new(bool)
		default:
			return d, false
		}
	default:
		return d, false
	}
	if v, _ := meta.Get("seed"); v != nil {
		s, ok := v.(string)
		if !ok {
			return d, false
		}
		s = jsonString(s)
		d.Seed = &s
	}
	if v, _ := meta.Get("now"); v != nil {
		s, ok := v.(string)
		if !ok {
			return d, false
		}
		if d.Now, ok = parseNowString(jsonString(s)); !ok {
			return d, false
		}
	}
	return d, true
}

// treeString is optString: absent or null → "".
func treeString(o *bridge.Object, key string) (string, bool) {
	v, _ := o.Get(key)
	if v == nil {
		return "", true
	}
	s, ok := v.(string)
	return jsonString(s), ok
}

// treeBool is optBool: absent or null → false.
func treeBool(o *bridge.Object, key string) (bool, bool) {
	v, _ := o.Get(key)
	if v == nil {
		return false, true
	}
	b, ok := v.(bool)
	return b, ok
}

// treeObject is optObject: absent or null → nil (reads from it yield absent).
func treeObject(o *bridge.Object, key string) (*bridge.Object, bool) {
	v, _ := o.Get(key)
	if v == nil {
		return nil, true
	}
	m, ok := v.(*bridge.Object)
	return m, ok
}

// jsonString turns a tree string into the string encoding/json decodes from the same JSON: the tree keeps
// an escaped lone surrogate as its 3-byte WTF-8 form (ED A0..BF xx), encoding/json writes U+FFFD. The
// tree's input was valid UTF-8, so such bytes can only have come from an escape.
func jsonString(s string) string {
	i := strings.IndexByte(s, 0xED)
	if i < 0 {
		return s
	}
	var b strings.Builder
	for ; i >= 0; i = strings.IndexByte(s, 0xED) {
		if i+2 < len(s) && s[i+1] >= 0xA0 && s[i+1] <= 0xBF {
			b.WriteString(s[:i])
			b.WriteRune(utf8.RuneError)
			s = s[i+3:]
			continue
		}
		b.WriteString(s[:i+1])
		s = s[i+1:]
	}
	b.WriteString(s)
	return b.String()
}
