package runner

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/testhelp"
	"github.com/codellm/codellm/internal/wire"
)

// TestRegisterBridge: the chat operation reaches the chat handler, an unknown operation is 400, and
// /sessions/{id}/api/v2/ runs in session {id} (and refuses a header naming another one).
func TestRegisterBridge(t *testing.T) {
	tr := newRunner(t, nil)
	mux := http.NewServeMux()
	chat := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.URL.Path+" "+r.Header.Get(wire.OperationHeader)+" "+string(b))
	})
	tr.RegisterBridge(func(method, pattern, _ string, h http.HandlerFunc) { mux.HandleFunc(method+" "+pattern, h) }, chat)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(path, body string, hdr map[string]string) (int, string) {
		st, _, b := testhelp.PostJSON(t, srv.URL+path, []byte(body), hdr)
		return st, string(b)
	}
	if st, b := post(PathExecute, `{"model":"m"}`, map[string]string{wire.OperationHeader: wire.OperationChat}); st != 200 || b != `/v1/chat/completions  {"model":"m"}` {
		t.Fatalf("chat operation: %d %s", st, b)
	}
	if st, b := post(PathExecute, `{}`, map[string]string{wire.OperationHeader: "openai.embeddings"}); st != 400 || !strings.Contains(b, "unknown X-Codellm-Operation") {
		t.Fatalf("unknown operation: %d %s", st, b)
	}
	write := `{"language":"bash","version":"*","files":[{"content":"echo $PWD > f; echo written"}]}`
	read := `{"language":"bash","version":"*","files":[{"content":"cat f"}]}`
	if st, b := post("/sessions/s%3A1/api/v2/execute", write, nil); st != 200 || !strings.Contains(b, "written") {
		t.Fatalf("session path: %d %s", st, b)
	}
	if st, b := post(PathExecute, read, map[string]string{wire.RuntimeSessionHeader: "s:1"}); st != 200 || !strings.Contains(b, `"stdout":"`+WorkDir) {
		t.Fatalf("the session path's files in session \"s:1\": %d %s", st, b)
	}
	if st, b := post("/sessions/s%3A1/api/v2/execute", read, map[string]string{wire.RuntimeSessionHeader: "other"}); st != 400 {
		t.Fatalf("header naming another session: %d %s", st, b)
	}
	if st, b := post("/sessions/x/api/v2/execute", `{"model":"m"}`, map[string]string{wire.OperationHeader: wire.OperationChat}); st != 200 || !strings.HasPrefix(b, "/v1/chat/completions") {
		t.Fatalf("chat through the session path: %d %s", st, b)
	}
	if st, _ := post("/sessions/x/other", "{}", nil); st != 404 {
		t.Fatalf("outside /api/v2: %d", st)
	}
}
