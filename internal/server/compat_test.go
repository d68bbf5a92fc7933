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
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/codellm/codellm/internal/idempotency"
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
	// The guard's final message repeats the answer of the finish call it was sent back.
	if m := resp.Choices[0]; len(m.Message.ToolCalls) != 0 || m.FinishReason != "stop" || m.Message.Content != "dev+user" {
		t.Fatalf("guard reply %+v", m)
	}
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

func idemServer(t *testing.T) *testServer {
	return startServer(t, options{cfg: func(c *server.Config) {
		c.Idempotency = &idempotency.Guard{Store: idempotency.NewMemory(idempotency.MemoryConfig{}), TTL: time.Minute}
	}})
}

// randomAnswer answers with fresh random bytes, so a second run cannot pass for a replay.
var randomAnswer = block("bash", `printf '{"answer":"%s"}' "$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"`)

// Idempotency-Key on the chat route: a repeat replays the first response byte for byte (success,
// failure, streamed) and runs nothing; another body under the same key is refused.
func TestIdempotencyChat(t *testing.T) {
	ts := idemServer(t)
	for _, tc := range []struct {
		name   string
		req    map[string]any
		status int
	}{
		{"success", chat(randomAnswer), 200},
		{"failure", chat(block("bash", "od -An -N8 -tx8 /dev/urandom >&2; exit 3")), 422},
		{"stream", func() map[string]any { r := chat(randomAnswer); r["stream"] = true; return r }(), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ts.runs(t)
			s1, h1, b1 := ts.post(t, "/v1/chat/completions", tc.req, "Idempotency-Key", "key-"+tc.name)
			s2, h2, b2 := ts.post(t, "/v1/chat/completions", tc.req, "Idempotency-Key", "key-"+tc.name)
			if s1 != tc.status || s2 != s1 || !bytes.Equal(b1, b2) || h1.Get("Idempotent-Replayed") != "" ||
				h2.Get("Idempotent-Replayed") != "true" || h2.Get("Content-Type") != h1.Get("Content-Type") {
				t.Fatalf("first %d %v %s\nsecond %d %v %s", s1, h1, b1, s2, h2, b2)
			}
			if h1.Get("X-Request-Id") == h2.Get("X-Request-Id") {
				t.Error("the replay reuses the first response's request id")
			}
			// The differential: without the key the same request runs again and answers differently.
			s3, _, b3 := ts.post(t, "/v1/chat/completions", tc.req)
			if s3 != tc.status || bytes.Equal(b3, b1) || ts.runs(t) != before+2 {
				t.Fatalf("unkeyed repeat: %d %s (runs %d)", s3, b3, ts.runs(t)-before)
			}
		})
	}
	before := ts.runs(t)
	status, _, body := ts.post(t, "/v1/chat/completions", chat(block("bash", "echo {}")), "Idempotency-Key", "key-success")
	wantError(t, status, body, 400, "idempotency_key_reused", "different request body")
	if ts.runs(t) != before {
		t.Fatal("a reused key ran code")
	}
	_, _, metrics := ts.get(t, "/metrics")
	for _, want := range []string{`codellm_idempotency_events_total{event="replayed"} 3`, `codellm_idempotency_events_total{event="mismatch"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(string(metrics), "idempotency"))
		}
	}
}

// The connection of openai-go's first attempt drops while the code runs (a middleware cuts it after
// 700 ms; openai-go does not retry its own timeouts, openai-node does, see test/clients); openai-go
// retries with X-Stainless-Retry-Count: 1, which attaches to the first run: the code runs once.
func TestIdempotencyClientTimeoutRetry(t *testing.T) {
	// The differential: without the guard the retry runs the code a second time.
	if n := dropAndRetry(t, startServer(t, options{})); n != 2 {
		t.Fatalf("without the guard the code ran %d times, want 2", n)
	}
	ts := idemServer(t)
	if n := dropAndRetry(t, ts); n != 1 {
		t.Fatalf("the code ran %d times", n)
	}
	_, _, metrics := ts.get(t, "/metrics")
	if !strings.Contains(string(metrics), `codellm_idempotency_events_total{event="attached"} 1`) {
		t.Errorf("no retry attached:\n%s", grepLines(string(metrics), "idempotency"))
	}
}

// dropAndRetry sends one slow chat request whose first attempt's connection drops and returns the
// number of runs the server counted.
func dropAndRetry(t *testing.T, ts *testServer) int {
	t.Helper()
	drop := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		if req.Header.Get("X-Stainless-Retry-Count") != "0" {
			return next(req)
		}
		ctx, cancel := context.WithTimeout(req.Context(), 700*time.Millisecond)
		defer cancel()
		if res, err := next(req.WithContext(ctx)); err == nil {
			res.Body.Close()
			return nil, errors.New("the first attempt finished before the cut; make the block slower")
		}
		return nil, errors.New("simulated connection drop")
	}
	c := oai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("unused"),
		option.WithMiddleware(drop), option.WithMaxRetries(2))
	resp, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model:    "codellm",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(block("bash", `sleep 1.5; echo '{"answer":"slow"}'`))},
	})
	if err != nil {
		t.Fatal(err)
	}
	sameCalls(t, oaiCalls(t, resp.Choices[0].Message.ToolCalls), []call{{"finish", map[string]any{"answer": "slow"}}})
	return ts.runs(t)
}

// POST /v1/responses is behind the same rule as the chat route.
func TestIdempotencyResponses(t *testing.T) {
	ts := idemServer(t)
	req := map[string]any{"model": "codellm", "input": randomAnswer, "stream": true}
	s1, _, b1 := ts.post(t, "/v1/responses", req, "Idempotency-Key", "r-1")
	s2, h2, b2 := ts.post(t, "/v1/responses", req, "Idempotency-Key", "r-1")
	if s1 != 200 || s2 != 200 || !bytes.Equal(b1, b2) || h2.Get("Idempotent-Replayed") != "true" || ts.runs(t) != 1 {
		t.Fatalf("first %d %s\nsecond %d %s (runs %d)", s1, b1, s2, b2, ts.runs(t))
	}
}
