package hub

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// goldenCall is one client request of a golden file and the hub's answer: the headers that matter, the
// body sent and the status and body received, ids replaced by placeholders (normalizer).
type goldenCall struct {
	Name    string            `json:"name"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers,omitempty"`
	Request string            `json:"request,omitempty"`
	Status  int               `json:"status"`
	Answer  map[string]string `json:"answerHeaders,omitempty"`
	Body    string            `json:"body"`
}

// goldenClient makes golden calls against h and records them.
type goldenClient struct {
	h     *testHub
	t     *testing.T
	norm  normalizer
	calls []goldenCall
	// answer lists the response headers a call records.
	answer []string
}

func (g *goldenClient) do(name, method, path string, hdr map[string]string, body string) reply {
	g.t.Helper()
	req, _ := http.NewRequest(method, g.h.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	r := doHTTP(g.t, req)
	c := goldenCall{Name: name, Method: method, Path: "/v1" + path, Request: g.norm.apply(body), Status: r.status, Body: g.norm.apply(string(r.body))}
	for k, v := range hdr {
		if k != "X-API-Key" {
			if c.Headers == nil {
				c.Headers = map[string]string{}
			}
			c.Headers[k] = g.norm.apply(v)
		}
	}
	for _, k := range g.answer {
		if v := r.header.Get(k); v != "" {
			if c.Answer == nil {
				c.Answer = map[string]string{}
			}
			c.Answer[k] = v
		}
	}
	g.calls = append(g.calls, c)
	return r
}

// TestWorkspaceToolsExecute: POST /v1/workspace-tools/execute spoken as LibreChat's workspace tools speak
// it (@librechat/agents executeWorkspaceTool: the bare request, X-LibreChat-Code-Worker-ID, Bearer or
// X-API-Key), answered in the Code API's shapes and statuses; the golden pairs are
// testdata/workspace_tools_golden.json (go test -run TestWorkspaceToolsExecute -update rewrites them).
func TestWorkspaceToolsExecute(t *testing.T) {
	h := newTestHub(t, nil)
	tools := &bridge.WorkspaceTools{ProtocolVersion: 1, Operations: []string{"read_file", "write_file", "edit_file", "execute_command"},
		Workspaces: []bridge.Workspace{{ID: "primary", Name: "project"}}, WriteFileModes: []string{"replace"}, EditFileModes: []string{"single"}}
	w := newWorker(t, h, "user-worker")
	w.caps.WorkspaceTools = tools
	w.pair(h)
	w.mustRegister()
	var mu sync.Mutex
	var seen []string
	expires := map[string]string{} // command → the assignment's expiresAt
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		req := a.Request.Object()
		b, _ := bridge.Canonical(req)
		mu.Lock()
		seen = append(seen, string(b))
		mu.Unlock()
		op, _ := req.Get("operation")
		path, _ := req.Get("path")
		switch {
		case op == "read_file" && path == "missing.md":
			s := rejected(a, w.incarnation, "File not found: missing.md")
			s.ErrorCode = "INVALID_PATH"
			return s
		case op == "read_file":
			return fulfilled(a, w.incarnation, `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"README.md","content":"# LibreChat","startLine":1,"endLine":1,"truncated":false}`)
		case op == "execute_command":
			cmd, _ := req.Get("command")
			mu.Lock()
			expires[cmd.(string)] = a.ExpiresAt
			mu.Unlock()
			return fulfilled(a, w.incarnation, `{"protocolVersion":1,"operation":"execute_command","workspaceId":"primary","exitCode":0,"stdout":"ready\n","stderr":"","truncated":false,"timedOut":false}`)
		}
		s := rejected(a, w.incarnation, "Workspace edit must match exactly once")
		s.ErrorCode = "EDIT_CONFLICT"
		return s
	})
	defer stop()

	g := &goldenClient{h: h, t: t, norm: normalizer{}}
	const route = "/workspace-tools/execute"
	lc := map[string]string{"Authorization": "Bearer " + apiKey, HeaderLibreChatWorker: "user-worker"}
	read := `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"README.md","startLine":1,"maxLines":200}`
	command := `{"protocolVersion":1,"operation":"execute_command","workspaceId":"primary","command":"pwd","cwd":"packages/api","timeoutMs":30000,"maxOutputBytes":262144}`
	if r := g.do("read_file", "POST", route, lc, read); r.status != 200 {
		t.Fatalf("read_file: %d %s", r.status, r.body)
	}
	g.do("execute_command (LibreChat's bash tool)", "POST", route, lc, command)
	long := `{"protocolVersion":1,"operation":"execute_command","workspaceId":"primary","command":"make test","timeoutMs":300000}`
	sent := time.Now()
	g.do("execute_command with a 5-minute limit", "POST", route, lc, long)
	g.do("read_file without the worker header: the one worker offering the workspace", "POST", route, map[string]string{"X-API-Key": apiKey}, read)
	g.do("rejected: INVALID_PATH is 422", "POST", route, lc, `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"missing.md"}`)
	g.do("rejected: EDIT_CONFLICT is 409", "POST", route, lc, `{"protocolVersion":1,"operation":"edit_file","workspaceId":"primary","path":"a.ts","oldText":"x","newText":"y"}`)
	g.do("not offered: write_file without overwrite needs the create mode", "POST", route, lc, `{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"n.ts","content":"x","overwrite":false}`)
	g.do("invalid request: a path leaving the workspace", "POST", route, lc, `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"../etc/passwd"}`)
	g.do("invalid request: not JSON", "POST", route, lc, `{`)
	g.do("invalid worker header", "POST", route, map[string]string{"X-API-Key": apiKey, HeaderLibreChatWorker: "no such/worker"}, read)
	g.do("a worker that is not online", "POST", route, map[string]string{"X-API-Key": apiKey, HeaderLibreChatWorker: "other-worker"}, read)
	g.do("no key", "POST", route, map[string]string{HeaderLibreChatWorker: "user-worker"}, read)
	g.do("GET", "GET", route, lc, "")
	mu.Lock()
	if len(seen) != 6 || seen[0] != read || seen[1] != command {
		t.Errorf("the worker saw %q; want the requests as sent, and nothing for refused ones", seen)
	}
	// The command's own limit, not the 1-minute exec deadline, bounds its assignment (plus 5 s to settle; expiresAt has millisecond precision).
	if at, err := time.Parse(time.RFC3339Nano, expires["make test"]); err != nil || at.Before(sent.Add(304*time.Second)) {
		t.Errorf("a 5-minute command's assignment expires at %q (sent %s)", expires["make test"], sent.Format(time.RFC3339Nano))
	}
	mu.Unlock()

	// A second worker offering the same workspace makes the header necessary: a write must not land in
	// the other machine's workspace.
	w2 := newWorker(t, h, "second-worker")
	w2.caps.WorkspaceTools = tools
	w2.pair(h)
	w2.mustRegister()
	g.do("two workers offer the workspace and no header names one", "POST", route, map[string]string{"X-API-Key": apiKey}, read)
	compareGoldenCalls(t, "testdata/workspace_tools_golden.json", g.calls)
}
