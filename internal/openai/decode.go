package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Reply is a chat.completion decoded back into what Completion and Stream were given: a hop that
// receives a finished completion (the hub, from a worker, §13.2) re-encodes it with this package's
// encoder so its stream is byte for byte the one the service would have sent for the same calls.
type Reply struct {
	ID      string
	Created int64
	Model   string
	Calls   []ToolCall
	// Text, when set, makes the reply a final assistant message with this content and no tool calls
	// (finish_reason "stop"): the re-execution guard's reply (§2.5).
	Text *string
	// Extra holds the top-level fields beyond the standard ones (x_codellm_debug, §13), each as its
	// encoded JSON so member order survives the round trip.
	Extra map[string]any
}

// ErrNotCompletion is returned by ParseCompletion for a body that is not a chat.completion of Completion's
// shape.
var ErrNotCompletion = errors.New("openai: not a chat.completion")

type wireCompletion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content   *string    `json:"content"`
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
}

// ParseCompletion decodes a chat.completion body (as Completion renders it) into a Reply. It fails with
// ErrNotCompletion unless the body is an object with object "chat.completion" and exactly one choice.
func ParseCompletion(body []byte) (*Reply, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotCompletion, err)
	}
	var c wireCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotCompletion, err)
	}
	if c.Object != "chat.completion" || len(c.Choices) != 1 {
		return nil, fmt.Errorf("%w: object %q with %d choices", ErrNotCompletion, c.Object, len(c.Choices))
	}
	r := &Reply{ID: c.ID, Created: c.Created, Model: c.Model}
	if msg := c.Choices[0].Message; msg.Content != nil && len(msg.ToolCalls) == 0 {
		r.Text = msg.Content
	}
	for _, tc := range c.Choices[0].Message.ToolCalls {
		r.Calls = append(r.Calls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	for k, v := range top {
		if slices.Contains(completionKeys, k) {
			continue
		}
		if r.Extra == nil {
			r.Extra = map[string]any{}
		}
		r.Extra[k] = json.RawMessage(escapeSeparators(v))
	}
	return r, nil
}

// escapeSeparators writes U+2028 and U+2029 as escapes, as marshal does (a hop may have re-encoded the
// JSON with them raw, as JSON.stringify does). In JSON text they can only occur inside strings, so the
// replacement is exact.
func escapeSeparators(v []byte) []byte {
	v = bytes.ReplaceAll(v, []byte("\u2028"), []byte(`\u2028`))
	return bytes.ReplaceAll(v, []byte("\u2029"), []byte(`\u2029`))
}
