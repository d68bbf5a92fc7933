package openai

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
)

// ResponseFields are what a Responses request says besides its conversation: the settings its Response
// object echoes, whether to store it, and its input items as input_items lists them.
type ResponseFields struct {
	// settings holds the echoed settings as sent (kinds checked), keyed by field; setting fills in OpenAI's
	// default for an absent or null one.
	settings           map[string]json.RawMessage
	Store              bool // store (default true): keep the response for retrieve and previous_response_id
	Background         bool // background: answer at once (queued) and run detached; poll with retrieve
	PreviousResponseID string
	// Items are the request's input items, each with an id (messages with a string content get it as one
	// input_text part, as OpenAI lists them).
	Items []json.RawMessage
}

// The echoed settings, in the order of OpenAI's Response object (before and after model and output),
// with OpenAI's defaults and the JSON kinds each may have (besides null).
var (
	echoedBefore = []string{"max_output_tokens", "max_tool_calls", "metadata"}
	echoedAfter  = []string{"parallel_tool_calls", "previous_response_id", "prompt_cache_key", "reasoning", "safety_identifier",
		"service_tier", "store", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p", "truncation"}
	settingDefaults = map[string]string{
		"max_output_tokens": "null", "max_tool_calls": "null", "metadata": "{}", "parallel_tool_calls": "true",
		"previous_response_id": "null", "prompt_cache_key": "null", "reasoning": `{"effort":null,"summary":null}`,
		"safety_identifier": "null", "service_tier": `"default"`, "store": "true", "temperature": "1",
		"text": `{"format":{"type":"text"}}`, "tool_choice": `"auto"`, "tools": "[]", "top_logprobs": "0", "top_p": "1",
		"truncation": `"disabled"`, "user": "null",
	}
	settingKinds = map[string]string{
		"max_output_tokens": "number", "max_tool_calls": "number", "metadata": "object", "parallel_tool_calls": "boolean",
		"previous_response_id": "string", "prompt_cache_key": "string", "reasoning": "object", "safety_identifier": "string",
		"service_tier": "string", "store": "boolean", "temperature": "number", "text": "object", "tool_choice": "",
		"tools": "array", "top_logprobs": "number", "top_p": "number", "truncation": "string", "user": "string",
		"background": "boolean",
	}
)

// setting is the echoed value of field k: as sent, or OpenAI's default.
func (f *ResponseFields) setting(k string) json.RawMessage {
	if v, ok := f.settings[k]; ok {
		return v
	}
	return json.RawMessage(settingDefaults[k])
}

// decodeResponseFields checks the kinds of the echoed settings (400 invalid_json naming the field) and
// reads store, background and previous_response_id.
func decodeResponseFields(top map[string]json.RawMessage) (*ResponseFields, *Error) {
	f := &ResponseFields{settings: map[string]json.RawMessage{}, Store: true}
	for k, want := range settingKinds {
		v, ok := top[k]
		if !ok || isNull(v) {
			continue
		}
		if got := kind(v); want != "" && got != want {
			return nil, badJSON(`field %q must be a %s or null, got %s`, k, want, got)
		}
		f.settings[k] = v
	}
	if v, ok := f.settings["store"]; ok {
		f.Store = string(v) == "true"
	}
	if v, ok := f.settings["background"]; ok {
		f.Background = string(v) == "true"
	}
	if v, ok := f.settings["previous_response_id"]; ok {
		str(v, &f.PreviousResponseID)
	}
	if f.Background && !f.Store {
		return nil, NewError(http.StatusBadRequest, "invalid_request",
			`"background": true needs "store": true: a background response is only reachable through retrieve`)
	}
	return f, nil
}

// inputItems lists input (already checked by decodeInput) as input_items does: a string is one user
// message; each item gets an id when it has none, and a message's string content becomes one text part.
func inputItems(raw json.RawMessage) []json.RawMessage {
	if raw == nil || isNull(raw) {
		return nil
	}
	var s string
	if str(raw, &s) {
		return []json.RawMessage{marshal(map[string]any{"id": newItemID("msg"), "type": "message", "role": "user", "status": "completed",
			"content": []map[string]string{{"type": "input_text", "text": s}}})}
	}
	list, _ := array(raw)
	out := make([]json.RawMessage, 0, len(list))
	for _, item := range list {
		obj, _ := object(item)
		var typ string
		str(obj["type"], &typ)
		if typ == "" && obj["role"] != nil {
			typ, obj["type"] = "message", marshal("message")
		}
		if _, ok := obj["id"]; !ok {
			obj["id"] = marshal(newItemID(itemPrefix(typ)))
		}
		var text string
		if typ == "message" && str(obj["content"], &text) {
			part := "input_text"
			var role string
			if str(obj["role"], &role); role == "assistant" {
				part = "output_text"
			}
			obj["content"] = marshal([]map[string]string{{"type": part, "text": text}})
		}
		out = append(out, marshal(obj))
	}
	return out
}

func itemPrefix(typ string) string {
	switch typ {
	case "message":
		return "msg"
	case "function_call":
		return "fc"
	case "function_call_output":
		return "fco"
	}
	return "item"
}

// newItemID is prefix + "_" + 24 random hex digits.
func newItemID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}
