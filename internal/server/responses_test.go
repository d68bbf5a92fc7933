package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// The Responses API through openai-go: a string input, the function_call output items, unique call ids.
func TestResponsesCreate(t *testing.T) {
	ts := startServer(t, options{})
	c := oaiClient(ts)
	params := responses.ResponseNewParams{
		Model:        "codellm",
		Instructions: oai.String(block("bash", "printf from-instructions")),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String(
			block("python", `import sys, json; print(json.dumps({"changes": [{"path": "a.md", "content": sys.stdin.read()}], "answer": "ok"}))`))},
	}
	resp, err := c.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "completed" || !strings.HasPrefix(resp.ID, "resp_") || len(resp.Output) != 2 {
		t.Fatalf("response %+v", resp)
	}
	want := []call{{"write_note", map[string]any{"path": "a.md", "content": "from-instructions"}}, {"finish", map[string]any{"answer": "ok"}}}
	var got []call
	for _, item := range resp.Output {
		fc := item.AsFunctionCall()
		if item.Type != "function_call" || !freshCallID(fc.CallID) || fc.Status != "completed" || !strings.HasPrefix(fc.ID, "fc_") {
			t.Fatalf("output item %s", item.RawJSON())
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(fc.Arguments), &args); err != nil {
			t.Fatal(err)
		}
		got = append(got, call{fc.Name, args})
	}
	sameCalls(t, got, want)

	// Streaming: the event sequence, and the deltas add up to the done arguments.
	s := c.Responses.NewStreaming(context.Background(), params)
	var types []string
	var args, done strings.Builder
	var completed responses.Response
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.function_call_arguments.done":
			done.WriteString(ev.Arguments)
		case "response.completed":
			completed = ev.Response
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	wantTypes := "response.created response.in_progress " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done " +
		"response.completed"
	if strings.Join(types, " ") != wantTypes || args.String() != done.String() || completed.Status != "completed" || len(completed.Output) != 2 {
		t.Fatalf("events %v\nargs %q done %q", types, args.String(), done.String())
	}
}

// Input items: messages with input_text parts (developer and user scanned, assistant not), the
// tool-list check on Responses tools, errors in the OpenAI shape, and the guard on function_call_output.
func TestResponsesInputItems(t *testing.T) {
	ts := startServer(t, options{})
	item := func(role, text string) map[string]any {
		return map[string]any{"type": "message", "role": role, "content": []any{map[string]any{"type": "input_text", "text": text}}}
	}
	req := map[string]any{"model": "gpt-5", "input": []any{
		item("developer", block("bash", "printf dev")),
		item("assistant", block("bash", "exit 9")),
		map[string]any{"role": "user", "content": block("python", `import sys, json; print(json.dumps({"answer": sys.stdin.read() + "+user"}))`)},
	}}
	status, _, body := ts.post(t, "/v1/responses", req)
	var r struct {
		ID     string                                           `json:"id"`
		Object string                                           `json:"object"`
		Model  string                                           `json:"model"`
		Output []struct{ Type, Name, Arguments, CallID string } `json:"output"`
	}
	if err := json.Unmarshal(body, &r); err != nil || status != 200 || r.Object != "response" || r.Model != "gpt-5" ||
		len(r.Output) != 1 || r.Output[0].Arguments != `{"answer":"dev+user"}` {
		t.Fatalf("%d %s", status, body)
	}
	req["tools"] = []any{map[string]any{"type": "function", "name": "write_note", "parameters": map[string]any{}}}
	status, _, body = ts.post(t, "/v1/responses", req)
	wantError(t, status, body, 422, "missing_tool", "finish")
	delete(req, "tools")

	_, err := func() (*responses.Response, error) {
		c := oaiClient(ts)
		return c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "codellm",
			Input: responses.ResponseNewParamsInputUnion{OfString: oai.String(block("bash", "echo boom >&2; exit 3"))}})
	}()
	var ae *oai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 422 || ae.Code != "nonzero_exit" || ae.Type != "code_execution_error" {
		t.Fatalf("error %v", err)
	}
	status, _, body = ts.post(t, "/v1/responses", map[string]any{"input": 3})
	wantError(t, status, body, 400, "invalid_input", `"input"`)

	before := ts.runs(t)
	req["input"] = append(req["input"].([]any),
		map[string]any{"type": "function_call", "call_id": r.Output[0].CallID, "name": "finish", "arguments": "{}"},
		map[string]any{"type": "function_call_output", "call_id": r.Output[0].CallID, "output": "ok"})
	status, _, body = ts.post(t, "/v1/responses", req)
	if status != 200 || !strings.Contains(string(body), `"type":"output_text","text":"codellm: run already completed; nothing was executed again"`) {
		t.Fatalf("guard: %d %s", status, body)
	}
	// Only the outputs, the calls kept server-side with previous_response_id: the stored conversation is
	// put back, so the guard sees the calls and answers with the first response's finish answer.
	req = map[string]any{"model": "gpt-5", "previous_response_id": r.ID,
		"input": []any{map[string]any{"type": "function_call_output", "call_id": r.Output[0].CallID, "output": "ok"}}}
	status, _, body = ts.post(t, "/v1/responses", req)
	if status != 200 || !strings.Contains(string(body), `"type":"output_text","text":"dev+user"`) || ts.runs(t) != before {
		t.Fatalf("guard on outputs only: %d %s (runs %d)", status, body, ts.runs(t)-before)
	}
	req["previous_response_id"] = "resp_x"
	status, _, body = ts.post(t, "/v1/responses", req)
	wantError(t, status, body, 400, "previous_response_not_found", `"resp_x"`)
}
