package openai

import (
	"errors"
	"reflect"
	"testing"
)

// ParseCompletion inverts Completion, so a hop re-encoding a completion with Stream sends what the
// service would have sent.
func TestParseCompletionRoundTrip(t *testing.T) {
	calls := []ToolCall{{ID: NewCallID(), Name: "execute", Arguments: `{"code":"print(1)\u2028"}`}, {ID: NewCallID(), Name: "finish", Arguments: `{}`}}
	extra := map[string]any{"x_codellm_debug": map[string]any{"b": "x\u2028<y>", "a": 1}}
	body := Completion("codellm-1", 42, "", calls, extra)
	r, err := ParseCompletion(body)
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "codellm-1" || r.Created != 42 || r.Model != DefaultModel || !reflect.DeepEqual(r.Calls, calls) {
		t.Fatalf("reply %+v", r)
	}
	if got, want := Stream(r.ID, r.Created, r.Model, r.Calls, true, r.Extra), Stream("codellm-1", 42, "", calls, true, extra); string(got) != string(want) {
		t.Fatalf("stream differs:\n got %s\nwant %s", got, want)
	}
	for _, bad := range []string{`[]`, `{"object":"chat.completion","choices":[]}`, `{"object":"list","choices":[{}]}`, `{"object":"chat.completion","choices":[{"message":{"tool_calls":"x"}}]}`} {
		if _, err := ParseCompletion([]byte(bad)); !errors.Is(err, ErrNotCompletion) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
