package openai

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/codellm/codellm/internal/contract"
)

// ToolCall is one assistant tool call (§10.1).
type ToolCall = contract.ToolCall

// DefaultModel is echoed when the request's model is empty (§10.1) and listed by /v1/models.
const DefaultModel = "codellm"

// NewID returns a response id: "codellm-" + 24 lower-case hex digits from crypto/rand (§10.1).
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails; on an OS failure it crashes the program
	return "codellm-" + hex.EncodeToString(b[:])
}

// SystemFingerprint is the system_fingerprint of every completion and chunk. OpenAI uses it to say which
// backend configuration answered; codellm has one, so it is a constant.
const SystemFingerprint = "fp_codellm"

// callIDAlphabet is the alphabet of OpenAI's own call ids ("call_" + 24 letters and digits).
const callIDAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// NewCallID returns a fresh tool-call id, "call_" + 24 random letters and digits from crypto/rand, like
// OpenAI's. Ids must differ across responses: @openai/agents refuses a conversation in which a call id
// repeats ("Tool call ID call_0 was reused").
func NewCallID() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = callIDAlphabet[int(b[i])%len(callIDAlphabet)] // 256 % 62 bias is irrelevant for uniqueness
	}
	return "call_" + string(b[:])
}

// WithCallIDs returns a copy of calls, in the same order, each with a fresh NewCallID.
func WithCallIDs(calls []ToolCall) []ToolCall {
	out := slices.Clone(calls)
	for i := range out {
		out[i].ID = NewCallID()
	}
	return out
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type function struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type toolCall struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	Function function `json:"function"`
}

// message.Content is null beside tool calls, as OpenAI sends it (a "" makes the AI SDK emit an empty text
// part); a final text message (the re-execution guard's) has content and no tool_calls member at all.
type message struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type choice struct {
	Index        int     `json:"index"`
	Message      message `json:"message"`
	FinishReason string  `json:"finish_reason"`
}

type completion struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []choice `json:"choices"`
	Usage             usage    `json:"usage"`
}

func echoModel(model string) string {
	if model == "" {
		return DefaultModel
	}
	return model
}

// Completion renders the 200 chat.completion body of §10.1: one choice whose message carries calls,
// content null, finish_reason "tool_calls" and zero usage. extra (the x_codellm_debug object, §13) is
// merged as top-level fields after the standard ones, in key order; keys that would shadow a standard
// field are dropped.
func Completion(id string, created int64, model string, calls []ToolCall, extra map[string]any) []byte {
	return (&Reply{ID: id, Created: created, Model: model, Calls: calls, Extra: extra}).Completion()
}

// Completion renders r as a chat.completion body: its tool calls with finish_reason "tool_calls", or,
// when r.Text is set, a final assistant message with that content, no tool calls and finish_reason
// "stop" (the re-execution guard's reply, §2.5).
func (r *Reply) Completion() []byte {
	msg, reason := message{Role: "assistant"}, "tool_calls"
	if r.Text != nil {
		msg.Content, reason = r.Text, "stop"
	} else {
		msg.ToolCalls = make([]toolCall, len(r.Calls))
		for i, c := range r.Calls {
			msg.ToolCalls[i] = toolCall{ID: c.ID, Type: "function", Function: function{Name: c.Name, Arguments: c.Arguments}}
		}
	}
	body := marshal(completion{
		ID: r.ID, Object: "chat.completion", Created: r.Created, Model: echoModel(r.Model), SystemFingerprint: SystemFingerprint,
		Choices: []choice{{Message: msg, FinishReason: reason}},
	})
	return mergeExtra(body, r.Extra, completionKeys)
}

var (
	completionKeys = []string{"id", "object", "created", "model", "system_fingerprint", "choices", "usage"}
	chunkKeys      = completionKeys
)

// mergeExtra appends extra's fields to the JSON object obj. A value that cannot be encoded (a codellm
// bug) is replaced by a string saying so rather than losing the whole reply.
func mergeExtra(obj []byte, extra map[string]any, reserved []string) []byte {
	if len(extra) == 0 {
		return obj
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if !slices.Contains(reserved, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := bytes.TrimSuffix(obj, []byte("}"))
	for _, k := range keys {
		v, err := marshalErr(extra[k])
		if err != nil {
			v = marshal("codellm: cannot encode " + k + ": " + err.Error())
		}
		out = append(out, ',')
		out = append(out, marshal(k)...)
		out = append(out, ':')
		out = append(out, v...)
	}
	return append(out, '}')
}

// streamToolCall is one tool-call delta. The first delta of a call carries id, type and the name with
// empty arguments; the following ones carry only index and an arguments fragment, as OpenAI sends them.
type streamToolCall struct {
	Index    int            `json:"index"`
	ID       string         `json:"id,omitempty"`
	Type     string         `json:"type,omitempty"`
	Function streamFunction `json:"function"`
}

type streamFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type delta struct {
	Role      string           `json:"role,omitempty"`
	Content   json.RawMessage  `json:"content,omitempty"` // the role chunk: null beside calls, "" before text
	ToolCalls []streamToolCall `json:"tool_calls,omitempty"`
}

// chunkChoice carries logprobs: null on every chunk, as OpenAI's do (codellm has no token log
// probabilities).
type chunkChoice struct {
	Index        int             `json:"index"`
	Delta        delta           `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// chunk.Usage is absent unless the request set stream_options.include_usage; then it is null on every
// chunk but the last, which carries the usage (OpenAI's documented shape).
type chunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

var jsonNull = json.RawMessage("null")

// FragmentBytes is the largest arguments fragment of one SSE chunk. JSON string escaping at most doubles
// it (arguments are already JSON, so only '"', '\\' and U+2028/U+2029 grow), which keeps every SSE line far
// below MaxSSELine.
const FragmentBytes = 4 << 10

// MaxSSELine is the longest SSE line codellm promises for the standard fields (langchaingo's reader fails
// on lines over 64 KiB; OpenAI's own lines are short).
const MaxSSELine = 16 << 10

// Fragments splits s into pieces of at most n bytes, cut on UTF-8 boundaries. An empty s is one empty
// piece.
func Fragments(s string, n int) []string {
	if len(s) <= n {
		return []string{s}
	}
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// Stream renders the SSE body of §10.3 as OpenAI streams tool calls: the role chunk (content null), per
// call a first delta with id, type, name and empty arguments followed by its arguments in fragments of
// at most FragmentBytes, the finish_reason chunk (carrying extra, §13), a usage chunk with empty choices
// when includeUsage, and "data: [DONE]". The run has completed before any byte is sent, so the whole body
// is built at once.
func Stream(id string, created int64, model string, calls []ToolCall, includeUsage bool, extra map[string]any) []byte {
	return (&Reply{ID: id, Created: created, Model: model, Calls: calls, Extra: extra}).Stream(includeUsage)
}

// Stream renders r as Stream does; a text reply (r.Text set) streams as OpenAI streams text instead: the
// role chunk with content "", the text in fragments of at most FragmentBytes, and finish_reason "stop".
func (r *Reply) Stream(includeUsage bool) []byte {
	var buf bytes.Buffer
	event := func(data []byte) {
		buf.WriteString("data: ")
		buf.Write(data)
		buf.WriteString("\n\n")
	}
	mk := func(d delta, reason *string) chunk {
		c := chunk{ID: r.ID, Object: "chat.completion.chunk", Created: r.Created, Model: echoModel(r.Model),
			SystemFingerprint: SystemFingerprint, Choices: []chunkChoice{{Delta: d, Logprobs: jsonNull, FinishReason: reason}}}
		if includeUsage {
			c.Usage = jsonNull
		}
		return c
	}
	reason := "tool_calls"
	if r.Text != nil {
		reason = "stop"
		event(marshal(mk(delta{Role: "assistant", Content: json.RawMessage(`""`)}, nil)))
		for _, frag := range Fragments(*r.Text, FragmentBytes) {
			if frag != "" {
				event(marshal(mk(delta{Content: marshal(frag)}, nil)))
			}
		}
	} else {
		event(marshal(mk(delta{Role: "assistant", Content: jsonNull}, nil)))
		streamCalls(r.Calls, func(d delta) { event(marshal(mk(d, nil))) })
	}
	event(mergeExtra(marshal(mk(delta{}, &reason)), r.Extra, chunkKeys))
	if includeUsage {
		u := mk(delta{}, nil)
		u.Choices, u.Usage = []chunkChoice{}, marshal(usage{})
		event(marshal(u))
	}
	event([]byte("[DONE]"))
	return buf.Bytes()
}

// streamCalls emits the deltas of calls: per call a head (id, type, name, empty arguments), then the
// arguments in fragments of at most FragmentBytes.
func streamCalls(calls []ToolCall, emit func(delta)) {
	for k, c := range calls {
		emit(delta{ToolCalls: []streamToolCall{{Index: k, ID: c.ID, Type: "function", Function: streamFunction{Name: c.Name}}}})
		for _, frag := range Fragments(c.Arguments, FragmentBytes) {
			if frag != "" {
				emit(delta{ToolCalls: []streamToolCall{{Index: k, Function: streamFunction{Arguments: frag}}}})
			}
		}
	}
}

// WriteStream writes the SSE reply of §10.3 with Content-Type text/event-stream and flushes it.
func WriteStream(w http.ResponseWriter, id string, created int64, model string, calls []ToolCall, includeUsage bool, extra map[string]any) error {
	return (&Reply{ID: id, Created: created, Model: model, Calls: calls, Extra: extra}).WriteStream(w, includeUsage)
}

// WriteStream writes r's SSE reply (Reply.Stream) with Content-Type text/event-stream and flushes it.
func (r *Reply) WriteStream(w http.ResponseWriter, includeUsage bool) error {
	body := r.Stream(includeUsage)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // keep reverse proxies from holding the events back
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err != nil {
		return err
	}
	if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// WriteCompletion writes a 200 chat.completion reply (§10.1).
func WriteCompletion(w http.ResponseWriter, id string, created int64, model string, calls []ToolCall, extra map[string]any) {
	writeBody(w, http.StatusOK, Completion(id, created, model, calls, extra))
}

var (
	modelBody  = `{"id":"codellm","object":"model","created":0,"owned_by":"codellm"}`
	modelsBody = []byte(`{"object":"list","data":[` + modelBody + `]}`)
)

// Models returns the /v1/models body (§1.1).
func Models() []byte { return slices.Clone(modelsBody) }

// Model returns the GET /v1/models/{id} body of the one model codellm lists, or a 404 model_not_found
// in the OpenAI error shape for any other id (the SDKs' models.retrieve).
func Model(id string) ([]byte, *Error) {
	if id != DefaultModel {
		return nil, NewError(http.StatusNotFound, "model_not_found",
			"The model %q does not exist; codellm serves only %q", truncate(id, 128), DefaultModel)
	}
	return []byte(modelBody), nil
}

// PutBytes stores a byte field for §13: m[field] is b as a JSON string with each invalid UTF-8 byte
// replaced by U+FFFD, and, only when b was not valid UTF-8, m[field+"_base64"] holds the exact bytes.
func PutBytes(m map[string]any, field string, b []byte) {
	if utf8.Valid(b) {
		m[field] = string(b)
		delete(m, field+"_base64")
		return
	}
	var s strings.Builder
	s.Grow(len(b) + 8)
	for rest := b; len(rest) > 0; {
		r, size := utf8.DecodeRune(rest)
		if r == utf8.RuneError && size == 1 {
			s.WriteRune(utf8.RuneError)
		} else {
			s.Write(rest[:size])
		}
		rest = rest[size:]
	}
	m[field] = s.String()
	m[field+"_base64"] = base64.StdEncoding.EncodeToString(b)
}
