package chat

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/openai"
)

// TestHandlerReadsTheCallersTree: with the body's tree on the context (the worker's assignment, issue 15
// item 3), the handler reads the request from the tree and never parses the bytes. The tree and the bytes
// are made to disagree on the model to see which one was read; a tree the converter declines (a numeric
// seed) falls back to the bytes, and so does a request without a tree.
func TestHandlerReadsTheCallersTree(t *testing.T) {
	s := New(Config{Engine: engine.New(engine.Config{}, nil)})
	answer := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"finish","arguments":"{}"}}]}`
	body := func(model, meta string) string {
		return `{"model":"` + model + `",` + tools + meta + `,"messages":[{"role":"user","content":"hi"},` + answer + `]}`
	}
	for _, c := range []struct {
		name, tree, want string
	}{
		{"tree", body("from-tree", ""), `"model":"from-tree"`},
		{"declined", body("from-tree", `,"metadata":{"seed":4.20}`), `"model":"from-bytes"`},
		{"none", "", `"model":"from-bytes"`},
	} {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body("from-bytes", `,"metadata":{"seed":4.20}`)))
		if c.tree != "" {
			o, err := bridge.ParseObject([]byte(c.tree))
			if err != nil {
				t.Fatal(err)
			}
			req = req.WithContext(openai.WithChatTree(req.Context(), o))
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("%s: %d %s, want %s", c.name, rec.Code, rec.Body, c.want)
		}
	}
}
