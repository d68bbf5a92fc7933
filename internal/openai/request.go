package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/markdown"
)

// BagName is the message name that marks fleet's delivery bag (§2.3).
const BagName = "fleet_input"

// MaxTimeoutSeconds caps a parsed metadata.timeout_seconds so that callers can multiply it by
// time.Second without overflow; the caller clamps it to --timeout anyway (§2.6).
const MaxTimeoutSeconds = 1<<31 - 1

// ChatRequest is the decoded request (§2.2): only the fields codellm reads; unknown fields are ignored.
type ChatRequest struct {
	Model          string
	Stream         bool
	IncludeUsage   bool // stream_options.include_usage
	Messages       []Message
	Tools          []string // offered function names; nil when tools is absent, null or empty
	ToolChoice     ToolChoice
	TimeoutSeconds int  // metadata.timeout_seconds; 0 when absent; at most MaxTimeoutSeconds
	Debug          bool // x_codellm_debug == true
	// NetworkAllow is metadata.network_allow split at commas: a per-request egress list that may only narrow
	// the operator's --network-allow; nil when absent.
	NetworkAllow *[]string
	API          string // "" for chat completions, APIResponses for POST /v1/responses
	Instructions string // the Responses API's instructions (also the first, system, message)
	// Response holds a Responses request's settings and input items (nil for chat completions).
	Response *ResponseFields

	// Determinism is metadata.deterministic, metadata.seed and metadata.now (issue 21).
	Determinism Determinism
}

// Message is one request message. Text is the content with the text parts concatenated in order.
type Message struct {
	Role, Name, Text string
	HasToolCalls     bool // a non-empty tool_calls array
	ToolResult       bool // a Responses function_call_output item
	// FinishAnswer is the answer argument of a finish call among the message's tool calls (a Responses
	// function_call item named finish); nil when there is none. The re-execution guard replies with it.
	FinishAnswer *string
}

// DecodeChatRequest decodes and shape-checks a chat-completions body (§2.2, §2.6). Errors are 400:
// invalid_json (naming the field) for bad JSON or a wrong type, invalid_messages for the messages shape,
// invalid_metadata for metadata.timeout_seconds. Null stands for absent everywhere, as in OpenAI's API.
func DecodeChatRequest(body []byte) (*ChatRequest, *Error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, badJSON("the request body must be a JSON object, got %s", kind(body))
		}
		return nil, badJSON("the request body is not valid JSON: %v", err)
	}
	if top == nil { // the body was `null`
		return nil, badJSON("the request body must be a JSON object, got null")
	}
	r := &ChatRequest{}
	var e *Error
	if r.Model, e = optString(top, "model", "model"); e != nil {
		return nil, e
	}
	if r.Stream, e = optBool(top, "stream", "stream"); e != nil {
		return nil, e
	}
	if opts, e := optObject(top, "stream_options", "stream_options"); e != nil {
		return nil, e
	} else if r.IncludeUsage, e = optBool(opts, "include_usage", "stream_options.include_usage"); e != nil {
		return nil, e
	}
	if r.Messages, e = decodeMessages(top["messages"]); e != nil {
		return nil, e
	}
	if r.Tools, e = decodeTools(top["tools"]); e != nil {
		return nil, e
	}
	if r.ToolChoice, e = decodeToolChoice(top["tool_choice"], false); e != nil {
		return nil, e
	}
	r.Tools = r.ToolChoice.restrict(r.Tools)
	if r.Debug, e = optBool(top, "x_codellm_debug", "x_codellm_debug"); e != nil {
		return nil, e
	}
	if e = decodeMetadata(top, r); e != nil {
		return nil, e
	}
	return r, nil
}

// decodeMetadata reads the metadata fields codellm honours (timeout_seconds, network_allow and the
// deterministic options) into r; the chat and Responses decoders share it.
func decodeMetadata(top map[string]json.RawMessage, r *ChatRequest) *Error {
	meta, e := optObject(top, "metadata", "metadata")
	if e != nil {
		return e
	}
	if r.TimeoutSeconds, e = decodeTimeout(meta["timeout_seconds"]); e != nil {
		return e
	}
	if r.NetworkAllow, e = decodeNetworkAllow(meta["network_allow"]); e != nil {
		return e
	}
	if r.Determinism, e = DecodeDeterminism(meta); e != nil {
		return e
	}
	return nil
}

// DecodeNetworkAllow is decodeNetworkAllow for the runner API's metadata (the same field, the same rule).
func DecodeNetworkAllow(meta map[string]json.RawMessage) (*[]string, *Error) {
	return decodeNetworkAllow(meta["network_allow"])
}

// decodeNetworkAllow parses metadata.network_allow: comma-separated host names; nil when absent.
func decodeNetworkAllow(raw json.RawMessage) (*[]string, *Error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	var s string
	if !str(raw, &s) {
		return nil, NewError(http.StatusBadRequest, "invalid_metadata",
			`field "metadata.network_allow" must be a string of comma-separated host names, got %s`, kind(raw))
	}
	list := []string{}
	for _, d := range strings.Split(s, ",") {
		if d = strings.TrimSpace(d); d != "" {
			list = append(list, d)
		}
	}
	return &list, nil
}

func badJSON(format string, args ...any) *Error {
	return NewError(http.StatusBadRequest, "invalid_json", format, args...)
}

func badMessages(format string, args ...any) *Error {
	return NewError(http.StatusBadRequest, "invalid_messages", format, args...)
}

func decodeMessages(raw json.RawMessage) ([]Message, *Error) {
	if raw == nil {
		return nil, badMessages(`field "messages" is missing; it must be a non-empty array of message objects`)
	}
	list, ok := array(raw)
	if !ok {
		return nil, badMessages(`field "messages" must be a non-empty array of message objects, got %s`, kind(raw))
	}
	if len(list) == 0 {
		return nil, badMessages(`field "messages" must be a non-empty array of message objects, got an empty array`)
	}
	msgs := make([]Message, len(list))
	for i, item := range list {
		field := fmt.Sprintf("messages[%d]", i)
		obj, ok := object(item)
		if !ok {
			return nil, badMessages(`field %q must be an object, got %s`, field, kind(item))
		}
		role, present := obj["role"]
		if !present {
			return nil, badMessages(`field "%s.role" is missing`, field)
		}
		var m Message
		if !str(role, &m.Role) {
			return nil, badMessages(`field "%s.role" must be a string, got %s`, field, kind(role))
		}
		if v, ok := obj["name"]; ok && !isNull(v) && !str(v, &m.Name) {
			return nil, badMessages(`field "%s.name" must be a string or null, got %s`, field, kind(v))
		}
		text, e := decodeContent(field+".content", obj["content"])
		if e != nil {
			return nil, e
		}
		m.Text = text
		if v, ok := obj["tool_calls"]; ok && !isNull(v) {
			calls, ok := array(v)
			if !ok {
				return nil, badMessages(`field "%s.tool_calls" must be an array or null, got %s`, field, kind(v))
			}
			m.HasToolCalls = len(calls) > 0
			m.FinishAnswer = chatFinishAnswer(calls)
		}
		msgs[i] = m
	}
	return msgs, nil
}

// chatFinishAnswer returns the answer of the last finish call among chat tool_calls entries
// ({function:{name:"finish", arguments:"{\"answer\":…}"}}); entries of another shape are skipped, not
// refused: the calls are the client's record of an earlier reply, read only for the guard's answer.
func chatFinishAnswer(calls []json.RawMessage) *string {
	var answer *string
	for _, c := range calls {
		obj, _ := object(c)
		fn, _ := object(obj["function"])
		var name, args string
		if str(fn["name"], &name) && name == contract.ToolFinish && str(fn["arguments"], &args) {
			if a := finishArgument(args); a != nil {
				answer = a
			}
		}
	}
	return answer
}

// finishArgument reads the answer out of a finish call's arguments; nil when they hold none.
func finishArgument(args string) *string {
	var v struct {
		Answer *string `json:"answer"`
	}
	if json.Unmarshal([]byte(args), &v) != nil {
		return nil
	}
	return v.Answer
}

// decodeContent concatenates the text parts of a content value: a string, null, or an array of parts
// whose "text" parts count and whose other parts (image_url, input_audio, file, refusal, …) are ignored.
func decodeContent(field string, raw json.RawMessage) (string, *Error) {
	if raw == nil || isNull(raw) {
		return "", nil
	}
	var s string
	if str(raw, &s) {
		return s, nil
	}
	parts, ok := array(raw)
	if !ok {
		return "", badMessages(`field %q must be a string, null or an array of content parts, got %s`, field, kind(raw))
	}
	var b strings.Builder
	for j, p := range parts {
		pf := fmt.Sprintf("%s[%d]", field, j)
		obj, ok := object(p)
		if !ok {
			return "", badMessages(`field %q must be a content part object, got %s`, pf, kind(p))
		}
		var typ string
		if t, ok := obj["type"]; !ok {
			return "", badMessages(`field "%s.type" is missing`, pf)
		} else if !str(t, &typ) {
			return "", badMessages(`field "%s.type" must be a string, got %s`, pf, kind(t))
		}
		if typ != "text" {
			continue
		}
		var text string
		if t, ok := obj["text"]; !ok {
			return "", badMessages(`field "%s.text" is missing from a text part`, pf)
		} else if !str(t, &text) {
			return "", badMessages(`field "%s.text" must be a string, got %s`, pf, kind(t))
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

// decodeTools returns the offered function names of a chat tools array ({type:"function",
// function:{name:…}}). tools absent, null or [] → nil (no tool-list check, §10.2). Entries without a
// function name (other tool types) offer nothing but still make the list non-nil, so a request that sent
// tools without finish fails the check instead of skipping it.
func decodeTools(raw json.RawMessage) ([]string, *Error) {
	return decodeToolList(raw, func(obj map[string]json.RawMessage, field string) (string, *Error) {
		fn, e := optObject(obj, "function", field+".function")
		if e != nil {
			return "", e
		}
		return optString(fn, "name", field+".function.name")
	})
}

// decodeToolList walks a tools array (absent, null or [] → nil) and collects the non-empty names that
// nameOf finds in each entry; the chat and Responses shapes differ only in where the name sits.
func decodeToolList(raw json.RawMessage, nameOf func(obj map[string]json.RawMessage, field string) (string, *Error)) ([]string, *Error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	list, ok := array(raw)
	if !ok {
		return nil, badJSON(`field "tools" must be an array or null, got %s`, kind(raw))
	}
	if len(list) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(list))
	for i, item := range list {
		field := fmt.Sprintf("tools[%d]", i)
		obj, ok := object(item)
		if !ok {
			return nil, badJSON(`field %q must be an object, got %s`, field, kind(item))
		}
		name, e := nameOf(obj, field)
		if e != nil {
			return nil, e
		}
		if name != "" {
			names = append(names, name)
		}
	}
	return names, nil
}

// decodeTimeout parses metadata.timeout_seconds: a decimal integer in a JSON string (digits only), or a
// JSON number with an integral value (§2.6). Values above MaxTimeoutSeconds saturate; the caller clamps to --timeout.
func decodeTimeout(raw json.RawMessage) (int, *Error) {
	if raw == nil || isNull(raw) {
		return 0, nil
	}
	digits := string(bytes.TrimSpace(raw))
	var s string
	if str(raw, &s) {
		digits = s
	}
	bad := NewError(http.StatusBadRequest, "invalid_metadata",
		`field "metadata.timeout_seconds" must be a positive integer number of seconds, got %s`, truncate(string(bytes.TrimSpace(raw)), 64))
	switch kind(raw) {
	case "string":
	case "number":
		// A JSON integer written as 100.0 or 1e2 is still an integer; fractions are not.
		f, err := strconv.ParseFloat(digits, 64)
		if err != nil || f != math.Trunc(f) || f <= 0 {
			return 0, bad
		}
		if f > MaxTimeoutSeconds {
			return MaxTimeoutSeconds, nil
		}
		return int(f), nil
	default:
		return 0, bad
	}
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" { // signs, fractions, exponents, spaces
		return 0, bad
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > MaxTimeoutSeconds { // only overflow is possible here: the text is all digits
		return MaxTimeoutSeconds, nil
	}
	if n <= 0 {
		return 0, bad
	}
	return int(n), nil
}

// Guarded reports the re-execution guard condition (§2.5): a message after the last user message (or
// anywhere, if there is none) is an assistant turn with non-empty tool_calls, or a Responses
// function_call_output (a client that keeps the calls server-side with previous_response_id sends only
// the outputs).
func (r *ChatRequest) Guarded() bool {
	for _, m := range r.Messages[r.lastUser()+1:] {
		if (m.Role == "assistant" && m.HasToolCalls) || m.ToolResult {
			return true
		}
	}
	return false
}

// GuardAnswer is the text of the re-execution guard's reply (§2.5): the answer of the last finish call
// after the last user message — what the run being repeated answered — or, when the conversation holds
// none (or an empty one), contract.GuardAnswer.
func (r *ChatRequest) GuardAnswer() string {
	answer := ""
	for _, m := range r.Messages[r.lastUser()+1:] {
		if m.FinishAnswer != nil {
			answer = *m.FinishAnswer
		}
	}
	if answer == "" {
		return contract.GuardAnswer
	}
	return answer
}

// lastUser is the index of the last user message, -1 when there is none.
func (r *ChatRequest) lastUser() int {
	u := -1
	for i, m := range r.Messages {
		if m.Role == "user" {
			u = i
		}
	}
	return u
}

// Bag returns the delivery bag's bytes exactly as received — the text of the one message named
// fleet_input, whatever its role — or nil without a bag (§2.3). Two bags or a bag that is not valid JSON
// are 400 invalid_fleet_input.
func (r *ChatRequest) Bag() ([]byte, *Error) {
	var bag []byte
	found := -1
	for i, m := range r.Messages {
		if m.Name != BagName {
			continue
		}
		if found >= 0 {
			return nil, NewError(http.StatusBadRequest, "invalid_fleet_input",
				"messages[%d] and messages[%d] are both named %q; a request carries at most one delivery bag", found, i, BagName)
		}
		found = i
		bag = []byte(m.Text)
	}
	if found < 0 {
		return nil, nil
	}
	if !json.Valid(bag) {
		var v any
		err := json.Unmarshal(bag, &v)
		if err == nil { // json.Valid and Unmarshal disagree only on pathological input
			err = fmt.Errorf("invalid JSON")
		}
		return nil, NewError(http.StatusBadRequest, "invalid_fleet_input",
			"the %q message (messages[%d]) is not valid JSON: %v", BagName, found, err)
	}
	return bag, nil
}

// Sources returns the code-carrying messages for markdown.Extract: system, developer and user messages
// in order, excluding the bag (§2.4). Message is the index into messages[]. developer is OpenAI's newer
// name for system (the AI SDK and LangChain send the system prompt as developer for o*/gpt-5* model
// ids), so it is scanned exactly like system; like system, it does not end the re-execution guard.
func (r *ChatRequest) Sources() []markdown.Source {
	var out []markdown.Source
	for i, m := range r.Messages {
		if scanned(m.Role) && m.Name != BagName {
			out = append(out, markdown.Source{Message: i, Text: m.Text})
		}
	}
	return out
}

// scanned reports whether a message of this role carries code (§2.4).
func scanned(role string) bool { return role == "system" || role == "developer" || role == "user" }

// optString reads obj[key] as a string; absent or null → "".
func optString(obj map[string]json.RawMessage, key, field string) (string, *Error) {
	v, ok := obj[key]
	if !ok || isNull(v) {
		return "", nil
	}
	var s string
	if !str(v, &s) {
		return "", badJSON(`field %q must be a string or null, got %s`, field, kind(v))
	}
	return s, nil
}

// optBool reads obj[key] as a boolean; absent or null → false.
func optBool(obj map[string]json.RawMessage, key, field string) (bool, *Error) {
	v, ok := obj[key]
	if !ok || isNull(v) {
		return false, nil
	}
	switch string(bytes.TrimSpace(v)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badJSON(`field %q must be a boolean or null, got %s`, field, kind(v))
}

// optObject reads obj[key] as an object; absent or null → nil map (reads from it yield absent).
func optObject(obj map[string]json.RawMessage, key, field string) (map[string]json.RawMessage, *Error) {
	v, ok := obj[key]
	if !ok || isNull(v) {
		return nil, nil
	}
	m, ok := object(v)
	if !ok {
		return nil, badJSON(`field %q must be an object or null, got %s`, field, kind(v))
	}
	return m, nil
}

// object decodes an object with exact, case-sensitive keys (encoding/json's struct matching is
// case-insensitive, which would let "Messages" stand in for "messages").
func object(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	if kind(raw) != "object" {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	return m, true
}

func array(raw json.RawMessage) ([]json.RawMessage, bool) {
	if kind(raw) != "array" {
		return nil, false
	}
	var l []json.RawMessage
	if json.Unmarshal(raw, &l) != nil {
		return nil, false
	}
	return l, true
}

func str(raw json.RawMessage, dst *string) bool {
	return kind(raw) == "string" && json.Unmarshal(raw, dst) == nil
}

func isNull(raw json.RawMessage) bool { return kind(raw) == "null" }

func kind(raw []byte) string { return contract.JSONKind(raw) }

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Timeout is the effective run timeout (§2.6): the request's timeout_seconds clamped to limit (the
// --timeout flag), or limit when the request sets none. A request can lower the limit, never extend it.
func (r *ChatRequest) Timeout(limit time.Duration) time.Duration {
	if r.TimeoutSeconds <= 0 {
		return limit
	}
	if d := time.Duration(r.TimeoutSeconds) * time.Second; d < limit {
		return d
	}
	return limit
}
