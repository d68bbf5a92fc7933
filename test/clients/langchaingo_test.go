package clients

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tmc/langchaingo/llms"
	"github.com/tmc/langchaingo/llms/openai"
)

// langchaingo (llms/openai) against the real serve: GenerateContent with tools, without and with
// streaming. Its stream reader is a default bufio.Scanner (64 KiB lines), so the streamed answer is made
// larger than that: it arrives only because codellm fragments the arguments into short SSE lines.
func TestLangchaingo(t *testing.T) {
	s := startServe(t)
	llm, err := openai.New(openai.WithBaseURL(s.base+"/v1"), openai.WithToken(apiKey), openai.WithModel("codellm"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tools := []llms.Tool{}
	for _, name := range []string{"write_note", "finish"} {
		tools = append(tools, llms.Tool{Type: "function", Function: &llms.FunctionDefinition{Name: name,
			Parameters: map[string]any{"type": "object", "additionalProperties": true}}})
	}
	ask := func(body string, opts ...llms.CallOption) []llms.ToolCall {
		t.Helper()
		msgs := []llms.MessageContent{llms.TextParts(llms.ChatMessageTypeHuman, body)}
		resp, err := llm.GenerateContent(ctx, msgs, append(opts, llms.WithTools(tools))...)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Choices[0].ToolCalls
	}
	args := func(c llms.ToolCall) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(c.FunctionCall.Arguments), &m); err != nil {
			t.Fatalf("%s arguments %q: %v", c.FunctionCall.Name, c.FunctionCall.Arguments, err)
		}
		return m
	}
	names := func(calls []llms.ToolCall) string {
		var n []string
		for _, c := range calls {
			n = append(n, c.FunctionCall.Name)
		}
		return strings.Join(n, ",")
	}

	calls := ask("```python\nimport json; print(json.dumps({\"changes\": [{\"path\": \"a.md\", \"content\": \"hi\"}], \"answer\": \"wrote\"}))\n```\n")
	if names(calls) != "write_note,finish" || args(calls[0])["path"] != "a.md" || args(calls[1])["answer"] != "wrote" ||
		!strings.HasPrefix(calls[0].ID, "call_") || calls[0].ID == calls[1].ID {
		t.Fatalf("%+v", calls)
	}

	chunks := 0
	stream := llms.WithStreamingFunc(func(context.Context, []byte) error { chunks++; return nil })
	big := "```python\nimport json; print(json.dumps({\"answer\": \"x\" * 100000}))\n```\n"
	calls = ask(big, stream)
	if names(calls) != "finish" || args(calls[0])["answer"] != strings.Repeat("x", 100000) || chunks < 25 {
		t.Fatalf("streamed %d chunks: %s, %d bytes of arguments", chunks, names(calls), len(calls[0].FunctionCall.Arguments))
	}
}
