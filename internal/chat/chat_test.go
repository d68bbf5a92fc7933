package chat

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// post sends body to the service's plain handler (the worker's in-process transport).
func post(s *Service, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	s.Handler().ServeHTTP(rec, req)
	return rec
}

const tools = `"tools":[{"type":"function","function":{"name":"finish","parameters":{"type":"object"}}}]`

// TestGuardAnswersWithoutRunning: a conversation that already holds the assistant's tool calls is
// answered by the re-execution guard through the core alone; the same body without those calls reaches
// the engine (which refuses two blocks over its limit of one), so the guard is what kept it from running.
func TestGuardAnswersWithoutRunning(t *testing.T) {
	m := metrics.NewService(func() float64 { return 0 })
	s := New(Config{Engine: engine.New(engine.Config{MaxBlocks: 1}, nil), Metrics: m})
	block := "```python\\nprint(1)\\n```\\n"
	user := `{"role":"user","content":"` + block + block + `"}`
	answered := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"finish","arguments":"{}"}}]}`

	// The reply is a final assistant message (no tool calls, finish_reason stop); its text is the answer
	// of the run's finish call, or contract.GuardAnswer when the conversation holds none.
	rec := post(s, `{"model":"m",`+tools+`,"messages":[`+user+`,`+answered+`]}`)
	want := `"message":{"role":"assistant","content":` + strconv.Quote(contract.GuardAnswer) + `},"finish_reason":"stop"`
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("guarded: %d %s", rec.Code, rec.Body)
	}
	withAnswer := strings.Replace(answered, `"arguments":"{}"`, `"arguments":"{\"answer\":\"wrote 2 notes\"}"`, 1)
	rec = post(s, `{"model":"m",`+tools+`,"stream":true,"messages":[`+user+`,`+withAnswer+`]}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"delta":{"content":"wrote 2 notes"}`) ||
		!strings.Contains(rec.Body.String(), `"finish_reason":"stop"`) || strings.Contains(rec.Body.String(), "tool_calls") {
		t.Fatalf("guarded stream: %d %s", rec.Code, rec.Body)
	}
	scrape := httptest.NewRecorder()
	m.Handler().ServeHTTP(scrape, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(scrape.Body.String(), "codellm_reexecution_guard_total 2\n") {
		t.Fatalf("reexecution guard counter not 2:\n%s", scrape.Body)
	}

	rec = post(s, `{"model":"m",`+tools+`,"messages":[`+user+`]}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "too_many_blocks") {
		t.Fatalf("unguarded body was answered by the guard: %d %s", rec.Code, rec.Body)
	}
}

// TestBodyLimit: the core enforces its own body limit (413 request_too_large), with or without a server.
func TestBodyLimit(t *testing.T) {
	s := New(Config{Engine: engine.New(engine.Config{}, nil), MaxBodyBytes: 64})
	rec := post(s, `{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("x", 200)+`"}]}`)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "request_too_large") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}
