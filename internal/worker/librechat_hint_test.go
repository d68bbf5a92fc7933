package worker

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// statefulExec posts one exec as @librechat/agents' CodeExecutor does on a stateful agent: the hint in
// the body, X-CodeAPI-Expected-Profile: stateful.
func statefulExec(t *testing.T, h *testHub, hint, code string) (res execResult, rtID, status string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"lang": "py", "code": code, "runtime_session_hint": hint})
	r := h.client(t, context.Background(), "/v1/exec", string(b), map[string]string{"User-Agent": "LibreChat/1.0", "X-CodeAPI-Expected-Profile": "stateful"})
	var out struct {
		execResult
		RuntimeSessionID string `json:"runtime_session_id"`
		RuntimeStatus    string `json:"runtime_status"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &out) != nil || r.header.Get("X-CodeAPI-Execution-Profile") != "stateful" {
		t.Fatalf("stateful exec: %d %s", r.status, r.body)
	}
	return out.execResult, out.RuntimeSessionID, out.RuntimeStatus
}

var runtimeID = regexp.MustCompile(`^rt_[0-9a-f]{40}$`)

// TestLibreChatStatefulByHint: on a stateful worker, two execs with the same runtime_session_hint and no
// session_id share their working directory (the second reads the file the first wrote), the answers echo
// one runtime_session_id with runtime_status new then reused, and another hint does not see the file.
func TestLibreChatStatefulByHint(t *testing.T) {
	h, _ := libreChatWorker(t, "lc-hint", newEmbedded(t, true))
	const hint = "v2:user:b5729fb0e3ca12e7a61ff6857b99d98e"
	first, id1, st1 := statefulExec(t, h, hint, "open('/mnt/data/notes.txt','w').write('from the first run')\nx = 41\nprint('wrote')")
	second, id2, st2 := statefulExec(t, h, hint, "print(open('/mnt/data/notes.txt').read())")
	if first.Stdout != "wrote\n" || second.Stdout != "from the first run\n" {
		t.Fatalf("the second exec of the hint did not see the first one's file: %+v / %+v", first, second)
	}
	if !runtimeID.MatchString(id1) || id2 != id1 || st1 != "new" || st2 != "reused" || second.SessionID != first.SessionID || !librechatID.MatchString(first.SessionID) {
		t.Fatalf("echo: %s %s / %s %s, sessions %s %s", id1, st1, id2, st2, first.SessionID, second.SessionID)
	}
	other, id3, st3 := statefulExec(t, h, "v2:user:another-conversation", "import os\nprint(os.path.exists('/mnt/data/notes.txt'))")
	if other.Stdout != "False\n" || id3 == id1 || st3 != "new" || other.SessionID == first.SessionID {
		t.Fatalf("another hint: %+v %s %s", other, id3, st3)
	}
}

// TestLibreChatWorkspaceExecute: LibreChat's workspace tools against a real worker with a workspace,
// through POST /v1/workspace-tools/execute as @librechat/agents' executeWorkspaceTool calls it (the bare
// request, Bearer key, X-LibreChat-Code-Worker-ID): a write lands in the directory, a read returns it as
// the bare result, and the worker's own rejections come back with the Code API's statuses.
func TestLibreChatWorkspaceExecute(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "lc-ws")
	ws := newWorkspace(t, true)
	start(t, ws.apply(baseConfig(h, id, path, newEmbedded(t, false))))
	h.waitReady(t, "lc-ws")
	call := func(body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, h.base+"/workspace-tools/execute", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-LibreChat-Code-Worker-ID", "lc-ws")
		r := doHTTP(t, req)
		var m map[string]any
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
		return r.status, m
	}
	if st, m := call(`{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"app.ts","content":"const ready = true;\n"}`); st != 200 || m["created"] != true {
		t.Fatalf("write_file: %d %v", st, m)
	}
	if b, err := os.ReadFile(filepath.Join(ws.root, "app.ts")); err != nil || string(b) != "const ready = true;\n" {
		t.Fatalf("the file in the workspace: %q %v", b, err)
	}
	st, m := call(`{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"app.ts","startLine":1,"maxLines":200}`)
	if st != 200 || m["operation"] != "read_file" || m["content"] != "const ready = true;" || m["result"] != nil {
		t.Fatalf("read_file: %d %v", st, m)
	}
	if st, m := call(`{"protocolVersion":1,"operation":"edit_file","workspaceId":"primary","path":"app.ts","oldText":"absent","newText":"x"}`); st != 409 || m["code"] != "EDIT_CONFLICT" {
		t.Fatalf("edit conflict: %d %v", st, m)
	}
	if st, m := call(`{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"missing.ts"}`); st != 422 || m["code"] == nil {
		t.Fatalf("missing file: %d %v", st, m)
	}
}
