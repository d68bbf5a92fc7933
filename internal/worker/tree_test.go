package worker

import (
	"context"
	"net/http"
	"testing"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/wire"
)

// TestEmbeddedChatGetsTheTree: the embedded chat operation receives request.body's tree on its request
// context, so the chat core reads the request from it instead of parsing the canonical bytes again (issue 15
// item 3).
func TestEmbeddedChatGetsTheTree(t *testing.T) {
	tree, err := bridge.ParseObject([]byte(`{"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := bridge.Canonical(tree)
	var got *bridge.Object
	e := &Embedded{Chat: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = openai.ChatTreeFrom(r.Context())
		_, _ = w.Write([]byte(`{}`))
	})}
	call := RunnerCall{Body: body, Tree: tree, Headers: [][2]string{{wire.OperationHeader, wire.OperationChat}}}
	if _, err := e.Execute(context.Background(), call); err != nil {
		t.Fatal(err)
	}
	if got != tree {
		t.Fatalf("chat handler got tree %p, want %p", got, tree)
	}
}
