package hub

import (
	"bytes"
	"testing"

	"github.com/codellm/codellm/internal/bridge"
)

func TestWorkspaceTools(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "ws-vm")
	w.caps.WorkspaceTools = &bridge.WorkspaceTools{ProtocolVersion: 1,
		Operations: []string{"read_file", "search_text", "write_file", "edit_file"},
		Workspaces: []bridge.Workspace{{ID: "primary", Name: "project"}}, WriteFileModes: []string{"replace"}, EditFileModes: []string{"single"}}
	w.pair(h)
	w.mustRegister()
	var kinds []string
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		kinds = append(kinds, a.ExecutionKind)
		req := a.Request.Object()
		op, _ := req.Get("operation")
		path, _ := req.Get("path")
		switch op {
		case "read_file":
			if path == "bad-result" {
				return fulfilled(a, w.incarnation, `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"bad-result","content":"a\nb","startLine":1,"endLine":1,"truncated":false}`)
			}
			return fulfilled(a, w.incarnation, `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"a.txt","content":"hello","startLine":1,"endLine":1,"truncated":false}`)
		default:
			s := rejected(a, w.incarnation, "Workspace edit must match exactly once")
			s.ErrorCode = "EDIT_CONFLICT"
			return s
		}
	})
	defer stop()

	r := h.client(t, "/v1/workspace-tools", `{"workerId":"ws-vm","request":{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"a.txt"}}`, nil)
	if r.status != 200 || string(r.body) != `{"result":{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"a.txt","content":"hello","startLine":1,"endLine":1,"truncated":false}}` {
		t.Fatalf("read: %d %s", r.status, r.body)
	}
	if len(kinds) != 1 || kinds[0] != bridge.KindWorkspaceTool {
		t.Fatalf("execution kinds %v", kinds)
	}
	// E27: overwrite:false needs "create", which this worker did not negotiate.
	r = h.client(t, "/v1/workspace-tools", `{"workerId":"ws-vm","request":{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"n","content":"x","overwrite":false}}`, nil)
	// Not retryable: 400 without Retry-After (a 503 would make clients retry what cannot succeed).
	if r.status != 400 || !bytes.Contains(r.body, []byte(`"code":"WORKER_MISMATCH"`)) || r.header.Get("Retry-After") != "" {
		t.Fatalf("unnegotiated mode: %d %s", r.status, r.body)
	}
	// A request that fails §9 validation never reaches a worker.
	r = h.client(t, "/v1/workspace-tools", `{"workerId":"ws-vm","request":{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"../etc/passwd"}}`, nil)
	if r.status != 400 || !bytes.Contains(r.body, []byte(`"code":"ASSIGNMENT_INVALID"`)) {
		t.Fatalf("invalid request: %d %s", r.status, r.body)
	}
	// A result that fails re-validation is a 502 RESULT_INVALID.
	r = h.client(t, "/v1/workspace-tools", `{"workerId":"ws-vm","request":{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"bad-result"}}`, nil)
	if r.status != 502 || !bytes.Contains(r.body, []byte(`"code":"RESULT_INVALID"`)) {
		t.Fatalf("invalid result: %d %s", r.status, r.body)
	}
	// A rejection keeps its errorCode and maps it to a status.
	r = h.client(t, "/v1/workspace-tools", `{"workerId":"ws-vm","request":{"protocolVersion":1,"operation":"edit_file","workspaceId":"primary","path":"a","oldText":"x","newText":"y"}}`, nil)
	if r.status != 409 || string(r.body) != `{"error":"Workspace edit must match exactly once","code":"EDIT_CONFLICT"}` {
		t.Fatalf("rejection: %d %s", r.status, r.body)
	}
	if len(kinds) != 3 {
		t.Fatalf("dispatched %d assignments, want 3", len(kinds))
	}
	for code, status := range map[string]int{"INVALID_PATH": 400, "WRITE_LIMIT_EXCEEDED": 413, "COMMAND_DISABLED": 403, "SEARCH_TIMEOUT": 504, "WRITE_UNAVAILABLE": 503, "": 503} {
		if toolErrorStatus(code) != status {
			t.Errorf("%s → %d", code, toolErrorStatus(code))
		}
	}
}
