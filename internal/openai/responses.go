package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/codellm/codellm/internal/contract"
)

// The Responses API (POST /v1/responses): the default of the AI SDK's openai() provider and of
// @openai/agents. A request is mapped onto the same ChatRequest as a chat completion, so extraction,
// the bag-free run, the tool-list check and the re-execution guard are the chat ones: instructions is a
// system message; input is a user message (a string) or a list of items whose messages keep their role
// (system, developer and user are scanned) and whose input_text/output_text/text parts are the text;
// function_call items are assistant tool calls and function_call_output items tool results, either of
// them after the last user message triggers the guard. Tools are {type:"function", name} at top level.

// APIResponses marks a ChatRequest decoded from a Responses API body.
const APIResponses = "responses"

// DecodeResponsesRequest decodes and shape-checks a POST /v1/responses body. Errors are 400 invalid_json
// (bad JSON, wrong top-level types) or invalid_input (the input's shape), naming the field.
func DecodeResponsesRequest(body []byte) (*ChatRequest, *Error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		if err == nil {
			return nil, badJSON("the request body must be a JSON object, got null")
		}
		if kind(body) != "object" && json.Valid(body) {
			return nil, badJSON("the request body must be a JSON object, got %s", kind(body))
		}
		return nil, badJSON("the request body is not valid JSON: %v", err)
	}
	r := &ChatRequest{API: APIResponses}
	var e *Error
	if r.Response, e = decodeResponseFields(top); e != nil {
		return nil, e
	}
	if r.Model, e = optString(top, "model", "model"); e != nil {
		return nil, e
	}
	if r.Stream, e = optBool(top, "stream", "stream"); e != nil {
		return nil, e
	}
	if r.Instructions, e = optString(top, "instructions", "instructions"); e != nil {
		return nil, e
	}
	if r.Instructions != "" {
		r.Messages = append(r.Messages, Message{Role: "system", Text: r.Instructions})
	}
	items, e := decodeInput(top["input"])
	if e != nil {
		return nil, e
	}
	r.Messages = append(r.Messages, items...)
	if len(r.Messages) == 0 && r.Response.PreviousResponseID == "" {
		return nil, badInput(`field "input" is missing or empty and there are no instructions; send the code as input or instructions`)
	}
	r.Response.Items = inputItems(top["input"])
	if r.Tools, e = decodeResponseTools(top["tools"]); e != nil {
		return nil, e
	}
	if r.ToolChoice, e = decodeToolChoice(top["tool_choice"], true); e != nil {
		return nil, e
	}
	r.Tools = r.ToolChoice.restrict(r.Tools)
	if e = decodeMetadata(top, r); e != nil {
		return nil, e
	}
	return r, nil
}

func badInput(format string, args ...any) *Error {
	return NewError(http.StatusBadRequest, "invalid_input", format, args...)
}

// decodeInput maps input (absent, a string, or an array of items) onto messages.
func decodeInput(raw json.RawMessage) ([]Message, *Error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	var s string
	if str(raw, &s) {
		return []Message{{Role: "user", Text: s}}, nil
	}
	list, ok := array(raw)
	if !ok {
		return nil, badInput(`field "input" must be a string or an array of input items, got %s`, kind(raw))
	}
	msgs := make([]Message, 0, len(list))
	for i, item := range list {
		field := fmt.Sprintf("input[%d]", i)
		obj, ok := object(item)
		if !ok {
			return nil, badInput(`field %q must be an object, got %s`, field, kind(item))
		}
		typ, e := optString(obj, "type", field+".type")
		if e != nil {
			return nil, badInput("%s", e.Message)
		}
		switch {
		case typ == "function_call":
			m := Message{Role: "assistant", HasToolCalls: true}
			var name, args string
			if str(obj["name"], &name) && name == contract.ToolFinish && str(obj["arguments"], &args) {
				m.FinishAnswer = finishArgument(args)
			}
			msgs = append(msgs, m)
		case typ == "function_call_output":
			msgs = append(msgs, Message{Role: "tool", ToolResult: true})
		case typ == "message" || (typ == "" && obj["role"] != nil):
			m, e := decodeInputMessage(field, obj)
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, m)
		default: // reasoning, item_reference and other items carry no code
			msgs = append(msgs, Message{Role: typ})
		}
	}
	return msgs, nil
}

func decodeInputMessage(field string, obj map[string]json.RawMessage) (Message, *Error) {
	var m Message
	role, ok := obj["role"]
	if !ok {
		return m, badInput(`field "%s.role" is missing`, field)
	}
	if !str(role, &m.Role) {
		return m, badInput(`field "%s.role" must be a string, got %s`, field, kind(role))
	}
	raw := obj["content"]
	if raw == nil || isNull(raw) {
		return m, nil
	}
	if str(raw, &m.Text) {
		return m, nil
	}
	parts, ok := array(raw)
	if !ok {
		return m, badInput(`field "%s.content" must be a string or an array of content parts, got %s`, field, kind(raw))
	}
	var b strings.Builder
	for j, p := range parts {
		pf := fmt.Sprintf("%s.content[%d]", field, j)
		po, ok := object(p)
		if !ok {
			return m, badInput(`field %q must be a content part object, got %s`, pf, kind(p))
		}
		var typ string
		if t, ok := po["type"]; !ok || !str(t, &typ) {
			return m, badInput(`field "%s.type" must be a string`, pf)
		}
		if typ != "input_text" && typ != "output_text" && typ != "text" {
			continue // input_image, input_file, refusal, …
		}
		var text string
		if t, ok := po["text"]; !ok || !str(t, &text) {
			return m, badInput(`field "%s.text" must be a string`, pf)
		}
		b.WriteString(text)
	}
	m.Text = b.String()
	return m, nil
}

// decodeResponseTools returns the offered function names of a Responses tools array ({type:"function",
// name:…}); like decodeTools, absent, null or [] → nil, and non-function tools offer nothing.
func decodeResponseTools(raw json.RawMessage) ([]string, *Error) {
	return decodeToolList(raw, func(obj map[string]json.RawMessage, field string) (string, *Error) {
		name, e := optString(obj, "name", field+".name")
		if e != nil {
			return "", e
		}
		if typ, _ := optString(obj, "type", field+".type"); typ != "function" {
			return "", nil
		}
		return name, nil
	})
}

// responseCall is a function_call output item.
type responseCall struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// responseMessage is an assistant message output item (the re-execution guard's final text).
type responseMessage struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

func newOutputText(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

// ResponseID derives a Responses id ("resp_" + hex) from a NewID.
func ResponseID(id string) string { return "resp_" + strings.TrimPrefix(id, "codellm-") }

func itemID(callID string) string { return "fc_" + strings.TrimPrefix(callID, "call_") }

// messageID derives the id of a response's message item from the response id.
func messageID(responseID string) string { return "msg_" + strings.TrimPrefix(responseID, "resp_") }

// Response statuses (OpenAI's).
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
	StatusCancelled  = "cancelled"
)

// ResponseState is what a Response object says beyond its request's settings.
type ResponseState struct {
	ID          string
	CreatedAt   int64
	Status      string
	CompletedAt int64  // 0 until completed
	Err         *Error // a failed response's error ({code, message})
	Out         *Reply // the output (completed responses); nil: no output yet
}

// Object renders the Response object of st for req, field for field as OpenAI's: the request's settings
// are echoed as sent (instructions, tools, tool_choice, metadata, temperature, …; OpenAI's defaults for
// those it did not send), the output items are one function_call per call or the guard's message, and
// usage is set once the response completed.
func (st ResponseState) Object(req *ChatRequest) []byte {
	rf := req.Response
	if rf == nil {
		rf = &ResponseFields{Store: true}
	}
	var b objectWriter
	b.field("id", marshal(st.ID))
	b.field("object", marshal("response"))
	b.field("created_at", marshal(st.CreatedAt))
	b.field("status", marshal(st.Status))
	b.field("background", marshal(rf.Background))
	b.field("completed_at", nullUnless(st.CompletedAt != 0, st.CompletedAt))
	b.field("error", jsonNull)
	if st.Err != nil {
		b.fields[len(b.fields)-1].value = marshal(map[string]string{"code": st.Err.Code, "message": st.Err.Message})
	}
	b.field("incomplete_details", jsonNull)
	b.field("instructions", nullUnless(req.Instructions != "", req.Instructions))
	for _, k := range echoedBefore {
		b.field(k, rf.setting(k))
	}
	b.field("model", marshal(echoModel(req.Model)))
	output := []any{}
	if st.Out != nil {
		output = outputItems(st.ID, st.Out)
	}
	b.field("output", marshal(output))
	for _, k := range echoedAfter {
		b.field(k, rf.setting(k))
	}
	b.field("usage", jsonNull)
	if st.Status == StatusCompleted {
		b.fields[len(b.fields)-1].value = marshal(responseUsage{InputTokensDetails: map[string]int{"cached_tokens": 0},
			OutputTokensDetails: map[string]int{"reasoning_tokens": 0}})
	}
	b.field("user", rf.setting("user"))
	return b.bytes()
}

func nullUnless(cond bool, v any) json.RawMessage {
	if !cond {
		return jsonNull
	}
	return marshal(v)
}

// objectWriter builds a JSON object with its members in the order they are added.
type objectWriter struct {
	fields []struct {
		key   string
		value json.RawMessage
	}
}

func (o *objectWriter) field(k string, v json.RawMessage) {
	o.fields = append(o.fields, struct {
		key   string
		value json.RawMessage
	}{k, v})
}

func (o *objectWriter) bytes() []byte {
	buf := []byte{'{'}
	for i, f := range o.fields {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, marshal(f.key)...)
		buf = append(buf, ':')
		buf = append(buf, f.value...)
	}
	return append(buf, '}')
}

// outputItems are a reply's output items: one function_call per call, or one assistant message.
func outputItems(id string, out *Reply) []any {
	if out.Text != nil {
		return []any{textItem(id, "completed", *out.Text)}
	}
	items := make([]any, 0, len(out.Calls))
	for _, c := range out.Calls {
		items = append(items, callItem(c, "completed", c.Arguments))
	}
	return items
}

func callItem(c ToolCall, status, args string) responseCall {
	return responseCall{Type: "function_call", ID: itemID(c.ID), CallID: c.ID, Name: c.Name, Arguments: args, Status: status}
}

func textItem(id, status, text string) responseMessage {
	m := responseMessage{Type: "message", ID: messageID(id), Status: status, Role: "assistant", Content: []outputText{}}
	if status == "completed" {
		m.Content = []outputText{newOutputText(text)}
	}
	return m
}

// ResponseStream renders the Responses SSE body: response.created, response.in_progress, then per call
// response.output_item.added (empty arguments), response.function_call_arguments.delta in fragments of
// at most FragmentBytes, response.function_call_arguments.done and response.output_item.done — or, for a
// text reply, the message item's output_item.added, content_part.added, output_text.delta fragments,
// output_text.done, content_part.done and output_item.done — then response.completed. Every event is
// "event: <type>" + "data: <json>" with a sequence_number.
func ResponseStream(done ResponseState, req *ChatRequest) []byte {
	var buf bytes.Buffer
	event := responsesEvents(&buf)
	started(event, done, req)
	if done.Out.Text != nil {
		streamText(done.ID, *done.Out.Text, event)
	} else {
		streamFunctionCalls(done.Out.Calls, event)
	}
	event("response.completed", map[string]any{"response": json.RawMessage(done.Object(req))})
	return buf.Bytes()
}

// ResponseFailedStream renders the event stream of a response whose run failed: response.created,
// response.in_progress, then response.failed whose response carries status "failed" and the error's code
// and message — what OpenAI streams, and what the SDKs turn into their error.
func ResponseFailedStream(failed ResponseState, req *ChatRequest) []byte {
	var buf bytes.Buffer
	event := responsesEvents(&buf)
	started(event, failed, req)
	event("response.failed", map[string]any{"response": json.RawMessage(failed.Object(req))})
	return buf.Bytes()
}

// started emits the response.created and response.in_progress events of the response final ends as.
func started(event eventFunc, final ResponseState, req *ChatRequest) {
	st := ResponseState{ID: final.ID, CreatedAt: final.CreatedAt, Status: StatusInProgress}
	event("response.created", map[string]any{"response": json.RawMessage(st.Object(req))})
	event("response.in_progress", map[string]any{"response": json.RawMessage(st.Object(req))})
}

// ReplyMessage is a reply as a message of the conversation a follow-up continues: the assistant turn with
// its tool calls (and its finish answer, for the re-execution guard), or its text.
func ReplyMessage(out *Reply) Message {
	if out.Text != nil {
		return Message{Role: "assistant", Text: *out.Text}
	}
	m := Message{Role: "assistant", HasToolCalls: len(out.Calls) > 0}
	for _, c := range out.Calls {
		if c.Name == contract.ToolFinish {
			m.FinishAnswer = finishArgument(c.Arguments)
		}
	}
	return m
}

// WithHistory returns the request's messages with history inserted after the instructions message (the
// conversation of a previous_response_id), and the request's own input messages (without instructions).
func (r *ChatRequest) WithHistory(history []Message) (all, own []Message) {
	n := 0
	if r.Instructions != "" {
		n = 1
	}
	own = r.Messages[n:]
	all = append(append(append([]Message{}, r.Messages[:n]...), history...), own...)
	return all, own
}

// responsesEvents returns an eventFunc writing Responses events to buf: "event: <type>" and "data: <json>" with
// the type and a sequence_number counted from 0.
func responsesEvents(buf *bytes.Buffer) eventFunc {
	seq := 0
	return func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		buf.WriteString("event: " + typ + "\ndata: ")
		buf.Write(marshal(fields))
		buf.WriteString("\n\n")
	}
}

type eventFunc func(typ string, fields map[string]any)

func streamFunctionCalls(calls []ToolCall, event eventFunc) {
	for k, c := range calls {
		event("response.output_item.added", map[string]any{"output_index": k, "item": callItem(c, "in_progress", "")})
		for _, frag := range Fragments(c.Arguments, FragmentBytes) {
			if frag != "" {
				event("response.function_call_arguments.delta", map[string]any{"item_id": itemID(c.ID), "output_index": k, "delta": frag})
			}
		}
		event("response.function_call_arguments.done", map[string]any{"item_id": itemID(c.ID), "output_index": k,
			"name": c.Name, "arguments": c.Arguments})
		event("response.output_item.done", map[string]any{"output_index": k, "item": callItem(c, "completed", c.Arguments)})
	}
}

// streamText streams one assistant message item with one output_text part, as OpenAI streams text.
func streamText(id, text string, event eventFunc) {
	item := messageID(id)
	at := func(fields map[string]any) map[string]any {
		fields["item_id"], fields["output_index"], fields["content_index"] = item, 0, 0
		return fields
	}
	event("response.output_item.added", map[string]any{"output_index": 0, "item": textItem(id, "in_progress", "")})
	event("response.content_part.added", at(map[string]any{"part": newOutputText("")}))
	for _, frag := range Fragments(text, FragmentBytes) {
		if frag != "" {
			event("response.output_text.delta", at(map[string]any{"delta": frag, "logprobs": []any{}}))
		}
	}
	event("response.output_text.done", at(map[string]any{"text": text, "logprobs": []any{}}))
	event("response.content_part.done", at(map[string]any{"part": newOutputText(text)}))
	event("response.output_item.done", map[string]any{"output_index": 0, "item": textItem(id, "completed", text)})
}
