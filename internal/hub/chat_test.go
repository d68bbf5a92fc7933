package hub

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/openai"
)

const completion = `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"codellm","choices":[{"index":0,"message":{"role":"assistant","content":"hi <there>","tool_calls":[{"id":"call_1","type":"function","function":{"name":"finish","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`

// §13.2: chat requests go only to workers advertising the chat label, carry
// stream:false and the operation header, and come back verbatim (or as SSE).
func TestChatCompletions(t *testing.T) {
	h := newTestHub(t, nil)
	plain := newWorker(t, h, "a-plain") // no chat label: never chosen
	plain.pair(h)
	plain.mustRegister()
	w := newWorker(t, h, "b-chat")
	w.caps.Runtimes = append(w.caps.Runtimes, ChatRuntimeLabel)
	w.pair(h)
	w.mustRegister()
	var seen []*bridge.Assignment
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		seen = append(seen, a)
		return fulfilled(a, w.incarnation, completion)
	})
	defer stop()

	body := `{"model":"codellm","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	r := h.client(t, "/v1/chat/completions", strings.Replace(body, `"stream":true`, `"stream":false`, 1), nil)
	if r.status != 200 || string(r.body) != completion {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	req, _ := seen[0].Request.Canonical()
	if string(req) != `{"body":{"model":"codellm","stream":false,"messages":[{"role":"user","content":"hi"}]},"headers":{"X-Codellm-Operation":"openai.chat.completions"}}` {
		t.Fatalf("assignment request %s", req)
	}
	r = h.client(t, "/v1/chat/completions", body, nil)
	if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", r.status, r.body)
	}
	// The stream is the service's encoder over the worker's calls (issue 15: the hub used to send all
	// calls and the content in one chunk, with no usage chunk); the completion's content is not part of
	// the service's wire shape (content is always null), so it is not streamed.
	want := openai.Stream("chatcmpl-1", 1700000000, "codellm", []openai.ToolCall{{ID: "call_1", Name: "finish", Arguments: "{}"}}, false, nil)
	if string(r.body) != string(want) {
		t.Fatalf("stream:\n got %s\nwant %s", r.body, want)
	}
	req, _ = seen[1].Request.Canonical()
	if !bytes.Contains(req, []byte(`"stream":false`)) {
		t.Fatalf("stream not forced off: %s", req)
	}
	// Errors use the OpenAI envelope.
	r = h.client(t, "/v1/chat/completions", `{"messages":"nope"}`, nil)
	if r.status != 400 || !bytes.Contains(r.body, []byte(`"error":{`)) {
		t.Fatalf("bad body: %d %s", r.status, r.body)
	}
	req2, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(body))
	if r := doHTTP(t, req2); r.status != 401 || !bytes.Contains(r.body, []byte(`"type":"authentication_error"`)) {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
}

func TestChatNoCapableWorker(t *testing.T) {
	// A capable worker could still register: the request waits the queue timeout for one.
	h := newTestHub(t, func(c *Config) { c.QueueTimeout = 200 * time.Millisecond })
	w := newWorker(t, h, "plain")
	w.pair(h)
	w.mustRegister()
	r := h.client(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 503 || r.header.Get("Retry-After") != "5" || !bytes.Contains(r.body, []byte(`"code":"worker_unavailable"`)) {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// A model label narrows the choice to workers that advertise it.
func TestChatModelRouting(t *testing.T) {
	h := newTestHub(t, nil)
	a := newWorker(t, h, "a-generic")
	a.caps.Runtimes = []string{ChatRuntimeLabel}
	a.pair(h)
	a.mustRegister()
	b := newWorker(t, h, "b-special")
	b.caps.Runtimes = []string{ChatRuntimeLabel, "model:special"}
	b.pair(h)
	b.mustRegister()
	stopA := a.serve(func(x *bridge.Assignment) bridge.Settlement { return fulfilled(x, a.incarnation, `{"from":"a"}`) })
	defer stopA()
	stopB := b.serve(func(x *bridge.Assignment) bridge.Settlement { return fulfilled(x, b.incarnation, `{"from":"b"}`) })
	defer stopB()
	for range 3 {
		if r := h.client(t, "/v1/chat/completions", `{"model":"special","messages":[{"role":"user","content":"x"}]}`, nil); string(r.body) != `{"from":"b"}` {
			t.Fatalf("model routing: %d %s", r.status, r.body)
		}
	}
}

// The hub streams a worker's completion byte for byte as the service streams the same calls: one delta
// per call with its arguments in fragments, the debug extension on the finish chunk, the usage chunk
// when asked for. A worker reply that is no chat.completion is a 502, not an empty stream.
func TestChatStreamMatchesService(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "chat")
	w.caps.Runtimes = append(w.caps.Runtimes, ChatRuntimeLabel)
	w.pair(h)
	w.mustRegister()
	big := `{"code":"` + strings.Repeat("print('\u2028 <&> é')\n", 600) + `"}`
	calls := []openai.ToolCall{
		{ID: openai.NewCallID(), Name: "execute", Arguments: big},
		{ID: openai.NewCallID(), Name: "finish", Arguments: `{"answer":"done"}`},
	}
	extra := map[string]any{"x_codellm_debug": map[string]any{"blocks": []any{map[string]any{"stdout": "x\u2028y", "exit_code": 0}}}}
	result := string(openai.Completion("codellm-0123", 1700000001, "special", calls, extra))
	bad := false
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		if bad {
			return fulfilled(a, w.incarnation, `{"from":"a"}`)
		}
		return fulfilled(a, w.incarnation, result)
	})
	defer stop()
	for _, usage := range []bool{false, true} {
		body := `{"model":"special","stream":true,"stream_options":{"include_usage":` + map[bool]string{false: "false", true: "true"}[usage] + `},"messages":[{"role":"user","content":"hi"}]}`
		r := h.client(t, "/v1/chat/completions", body, nil)
		want := openai.Stream("codellm-0123", 1700000001, "special", calls, usage, extra)
		if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream" || string(r.body) != string(want) {
			t.Fatalf("include_usage=%v: %d\n got %.3000s\nwant %.3000s", usage, r.status, r.body, want)
		}
		if n := strings.Count(string(r.body), "\n\n"); n < 6 {
			t.Fatalf("expected argument fragments, got %d events", n)
		}
	}
	bad = true
	r := h.client(t, "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 502 || !bytes.Contains(r.body, []byte(`"code":"execution_failed"`)) {
		t.Fatalf("not a completion: %d %s", r.status, r.body)
	}
}
