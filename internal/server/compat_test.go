package server_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"

	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/server"
)

// The OpenAI-compatibility details the real clients depend on (issue 16).

// models.retrieve works for codellm and fails in the OpenAI error shape for any other id.
func TestModelRetrieve(t *testing.T) {
	ts := startServer(t, options{cfg: func(c *server.Config) { c.APIKey = "k" }})
	c := oaiClient(ts)
	m, err := c.Models.Get(context.Background(), "codellm")
	if err != nil || m.ID != "codellm" || m.Object != "model" || m.OwnedBy != "codellm" {
		t.Fatalf("models.retrieve(codellm) = %+v, %v", m, err)
	}
	_, err = c.Models.Get(context.Background(), "gpt-4o")
	var ae *oai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Code != "model_not_found" || ae.Type != "invalid_request_error" ||
		!strings.Contains(ae.Message, `"gpt-4o"`) {
		t.Fatalf("models.retrieve(gpt-4o) error = %v", err)
	}
	status, _, body := ts.get(t, "/v1/models/a/b")
	wantError(t, status, body, 404, "model_not_found", "a/b")
	ts.Key = ""
	status, _, body = ts.get(t, "/v1/models/codellm")
	wantError(t, status, body, 401, "invalid_api_key", "")
}

// Every response carries X-Request-Id: the client's own when safe, a fresh req_ id otherwise.
func TestRequestIDHeader(t *testing.T) {
	ts := startServer(t, options{})
	fresh := regexp.MustCompile(`^req_[0-9a-f]{32}$`)
	_, h1, _ := ts.get(t, "/healthz")
	_, h2, _ := ts.get(t, "/nope")
	_, h3, _ := ts.post(t, "/v1/chat/completions", "{")
	for i, h := range []http.Header{h1, h2, h3} {
		if !fresh.MatchString(h.Get("X-Request-Id")) {
			t.Errorf("response %d: X-Request-Id %q", i, h.Get("X-Request-Id"))
		}
	}
	if h1.Get("X-Request-Id") == h2.Get("X-Request-Id") {
		t.Error("two responses share a request id")
	}
	_, h, _ := ts.post(t, "/v1/chat/completions", chat(block("bash", "echo {}")), "X-Request-Id", "trace-42.a:b")
	if h.Get("X-Request-Id") != "trace-42.a:b" {
		t.Errorf("safe client id not echoed: %q", h.Get("X-Request-Id"))
	}
	_, h, _ = ts.post(t, "/v1/chat/completions", chat(block("bash", "echo {}")), "X-Request-Id", "a b<script>")
	if !fresh.MatchString(h.Get("X-Request-Id")) {
		t.Errorf("unsafe client id echoed: %q", h.Get("X-Request-Id"))
	}
	if !strings.Contains(ts.logs.String(), "request_id=trace-42.a:b") {
		t.Error("the request id is not in the request log")
	}
}

// developer messages carry code like system ones (the AI SDK and LangChain send the system prompt as
// developer for o*/gpt-5* ids), and a second step after a developer-only conversation is guarded.
func TestDeveloperMessages(t *testing.T) {
	ts := startServer(t, options{})
	c := oaiClient(ts)
	resp, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model: "gpt-5-mini",
		Messages: []oai.ChatCompletionMessageParamUnion{
			oai.DeveloperMessage(block("bash", "printf dev")),
			oai.UserMessage(block("python", `import sys, json; print(json.dumps({"answer": sys.stdin.read() + "+user"}))`)),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sameCalls(t, oaiCalls(t, resp.Choices[0].Message.ToolCalls), []call{{"finish", map[string]any{"answer": "dev+user"}}})
	before := ts.runs(t)
	tc := resp.Choices[0].Message.ToolCalls[0]
	resp, err = c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model: "gpt-5-mini",
		Messages: []oai.ChatCompletionMessageParamUnion{
			oai.DeveloperMessage(block("bash", `echo '{"answer":"ran again"}'`)),
			resp.Choices[0].Message.ToParam(),
			oai.ToolMessage("ok", tc.ID),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sameCalls(t, oaiCalls(t, resp.Choices[0].Message.ToolCalls), []call{{"finish", map[string]any{
		"answer": "codellm: run already completed; nothing was executed again"}}})
	if ts.runs(t) != before {
		t.Fatal("the guarded second step ran code")
	}
}

// The completion's wire details: content null beside the calls, system_fingerprint, call ids unique
// across responses (freshCallID checks them in decodeCompletion).
func TestCompletionWireDetails(t *testing.T) {
	ts := startServer(t, options{})
	req := chat(block("bash", `echo '{"changes":[{"path":"a.md","content":"x"}],"answer":"y"}'`))
	for range 2 {
		status, _, body := ts.post(t, "/v1/chat/completions", req)
		decodeCompletion(t, status, body)
		if !bytes.Contains(body, []byte(`"message":{"role":"assistant","content":null,"tool_calls":[`)) ||
			!bytes.Contains(body, []byte(`"system_fingerprint":"fp_codellm"`)) {
			t.Fatalf("wire details missing: %s", body)
		}
	}
}

// A large streamed answer arrives in fragments: no SSE line over 16 KiB, so a line reader with a small
// buffer (langchaingo's limit is 64 KiB) reads it, and openai-go's accumulator rebuilds it exactly.
func TestStreamLargeAnswer(t *testing.T) {
	ts := startServer(t, options{})
	code := `import json; s = "\"<é>\\\\" * 50000; print(json.dumps({"changes": [{"path": "big.md", "content": s}], "answer": "done"}))`
	req := chat(block("python", code))
	req["stream"] = true
	status, _, body := ts.post(t, "/v1/chat/completions", req)
	if status != 200 {
		t.Fatalf("status %d: %.300s", status, body)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, openai.MaxSSELine), openai.MaxSSELine)
	lines := 0
	for sc.Scan() {
		lines++
	}
	if err := sc.Err(); err != nil || lines < 200 {
		t.Fatalf("reading the stream with a %d-byte line buffer: %v after %d lines", openai.MaxSSELine, err, lines)
	}
	c := oaiClient(ts)
	s := c.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{
		Model:    "codellm",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(block("python", code))},
	})
	acc := oai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	calls := oaiCalls(t, acc.Choices[0].Message.ToolCalls)
	want := strings.Repeat(`"<é>\\`, 50000)
	if len(calls) != 2 || calls[0].Args["content"] != want || calls[1].Args["answer"] != "done" {
		t.Fatalf("accumulated calls differ (%d calls)", len(calls))
	}
}
