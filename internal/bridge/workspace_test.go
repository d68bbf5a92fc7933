package bridge

import (
	"strings"
	"testing"
)

func TestPortablePaths(t *testing.T) {
	good := map[string]string{"a": "a", "a/./b//c": "a/b/c", ".": "", "dir/": "dir", "é/ü.txt": "é/ü.txt"}
	for in, want := range good {
		if got, ok := NormalisePortablePath(in); !ok || got != want {
			t.Errorf("%q: %q %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "/etc", "a/../b", "..", "a\\b", "C:x", "a\x00b", strings.Repeat("a", 4097)} {
		if _, ok := NormalisePortablePath(bad); ok {
			t.Errorf("accepted %q", bad)
		}
	}
	if !(ComparePaths("a/b/c", "a/b.txt") < 0 && ComparePaths("a/b.txt", "a/c") < 0 && ComparePaths("a", "a/b") < 0 && ComparePaths("b", "b") == 0) {
		t.Fatal("path order")
	}
}

func wsReq(t *testing.T, s string) *WorkspaceRequest {
	t.Helper()
	r, err := ValidateWorkspaceRequest(mustObj(t, s))
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return r
}

func TestValidateWorkspaceRequest(t *testing.T) {
	r := wsReq(t, `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"./src/a.go"}`)
	if r.Path != "src/a.go" || r.StartLine != 1 || r.MaxLines != 200 {
		t.Fatalf("%+v", r)
	}
	r = wsReq(t, `{"protocolVersion":1,"operation":"edit_file","workspaceId":"primary","path":"a","edits":[{"oldText":"x","newText":"y"},{"oldText":"z","newText":""}],"expectedBaseSha256":"`+strings.Repeat("a", 64)+`"}`)
	if !r.Batch || r.EditCount != 2 || !r.ExpectedBaseSHA256 {
		t.Fatalf("%+v", r)
	}
	r = wsReq(t, `{"protocolVersion":1,"operation":"list_files","workspaceId":"primary","path":"src","afterPath":"src/m.go"}`)
	if !r.HasAfterPath || r.MaxResults != 100 {
		t.Fatalf("%+v", r)
	}
	r = wsReq(t, `{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"n.txt","content":"hi","overwrite":false}`)
	if !r.NoOverwrite {
		t.Fatalf("%+v", r)
	}
	bad := []string{
		`{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"a","extra":1}`,
		`{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"../a"}`,
		`{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"a","maxLines":501}`,
		`{"protocolVersion":1,"operation":"read_file","workspaceId":"primary"}`,
		`{"protocolVersion":1,"operation":"rm_rf","workspaceId":"primary"}`,
		`{"protocolVersion":1,"operation":"search_text","workspaceId":"primary","query":"a\nb"}`,
		`{"protocolVersion":1,"operation":"search_text","workspaceId":"primary","query":""}`,
		`{"protocolVersion":1,"operation":"list_files","workspaceId":"primary","path":"src","afterPath":"other/x"}`,
		`{"protocolVersion":1,"operation":"list_files","workspaceId":"primary","afterPath":"./x"}`,
		`{"protocolVersion":1,"operation":"edit_file","workspaceId":"primary","path":"a","oldText":"x","newText":"y","edits":[{"oldText":"x","newText":"y"}]}`,
		`{"protocolVersion":1,"operation":"edit_file","workspaceId":"primary","path":"a","oldText":"","newText":"y"}`,
		`{"protocolVersion":1,"operation":"preview_edit","workspaceId":"primary","path":"a","oldText":"x","newText":"y","expectedBaseSha256":"` + strings.Repeat("a", 64) + `"}`,
		`{"protocolVersion":1,"operation":"execute_command","workspaceId":"primary","command":"  "}`,
		`{"protocolVersion":1,"operation":"execute_command","workspaceId":"primary","command":"ls","timeoutMs":0}`,
	}
	for _, s := range bad {
		if _, err := ValidateWorkspaceRequest(mustObj(t, s)); err == nil {
			t.Errorf("accepted %s", s)
		}
	}
}

func TestAllowsRequest(t *testing.T) {
	c := Capabilities{WorkspaceTools: &WorkspaceTools{ProtocolVersion: 1,
		Operations: []string{"read_file", "search_text", "write_file", "edit_file", "list_files"},
		Workspaces: []Workspace{{ID: "primary", Name: "p"}}, WriteFileModes: []string{"replace"}, EditFileModes: []string{"single"}}}
	yes := wsReq(t, `{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"a","content":""}`)
	no := []*WorkspaceRequest{
		wsReq(t, `{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"a","content":"","overwrite":false}`), // E27
		wsReq(t, `{"protocolVersion":1,"operation":"edit_file","workspaceId":"primary","path":"a","edits":[{"oldText":"x","newText":"y"}]}`),
		wsReq(t, `{"protocolVersion":1,"operation":"list_files","workspaceId":"primary","afterPath":"x"}`),
		wsReq(t, `{"protocolVersion":1,"operation":"read_file","workspaceId":"other","path":"a"}`),
		wsReq(t, `{"protocolVersion":1,"operation":"execute_command","workspaceId":"primary","command":"ls"}`),
	}
	if !c.AllowsRequest(yes) {
		t.Fatal("plain write refused")
	}
	for _, r := range no {
		if c.AllowsRequest(r) {
			t.Errorf("allowed %+v", r)
		}
	}
}

func TestValidateWorkspaceResult(t *testing.T) {
	env := `"protocolVersion":1,"operation":"%s","workspaceId":"primary"`
	res := func(op, rest string) *Object {
		return mustObj(t, "{"+strings.Replace(env, "%s", op, 1)+","+rest+"}")
	}
	read := wsReq(t, `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"a","startLine":2,"maxLines":2}`)
	cases := []struct {
		req  *WorkspaceRequest
		res  *Object
		want bool
	}{
		{read, res("read_file", `"path":"a","content":"x\ny","startLine":2,"endLine":3,"truncated":true,"nextStartLine":4`), true},
		{read, res("read_file", `"path":"a","content":"","startLine":2,"endLine":1,"truncated":false`), true},
		{read, res("read_file", `"path":"a","content":"x","startLine":2,"endLine":3,"truncated":false`), false},                      // line count
		{read, res("read_file", `"path":"a","content":"x\ny","startLine":2,"endLine":3,"truncated":false,"nextStartLine":4`), false}, // next without truncated
		{read, res("read_file", `"path":"a","content":"x\ny\nz","startLine":2,"endLine":4,"truncated":false`), false},                // beyond maxLines
		{read, res("read_file", `"path":"a","content":"x","startLine":2,"endLine":2,"truncated":false,"x":1`), false},                // unknown key
		{read, res("search_text", `"matches":[],"truncated":false`), false},                                                          // wrong operation
	}
	search := wsReq(t, `{"protocolVersion":1,"operation":"search_text","workspaceId":"primary","query":"foo","maxResults":1}`)
	cases = append(cases,
		struct {
			req  *WorkspaceRequest
			res  *Object
			want bool
		}{search, res("search_text", `"matches":[{"path":"a","line":1,"column":3,"text":"a foo"}],"truncated":true`), true},
		struct {
			req  *WorkspaceRequest
			res  *Object
			want bool
		}{search, res("search_text", `"matches":[{"path":"a","line":1,"column":3,"text":"a bar"}],"truncated":false`), false},
	)
	list := wsReq(t, `{"protocolVersion":1,"operation":"list_files","workspaceId":"primary","afterPath":"a/b/c"}`)
	for _, c := range []struct {
		rest string
		want bool
	}{
		{`"paths":["a/b.txt","a/c"],"truncated":true,"nextAfterPath":"a/c"`, true},
		{`"paths":["a/c","a/b.txt"],"truncated":false`, false},
		{`"paths":["a/b/c"],"truncated":false`, false},
		{`"paths":["a/c"],"truncated":false,"nextAfterPath":"a/c"`, false},
	} {
		if got := ValidateWorkspaceResult(list, res("list_files", c.rest), true); got != c.want {
			t.Errorf("list %s: %v", c.rest, got)
		}
	}
	if ValidateWorkspaceResult(list, res("list_files", `"paths":["a/c"],"truncated":true,"nextAfterPath":"a/c"`), false) {
		t.Error("nextAfterPath without after_path negotiated")
	}
	exec := wsReq(t, `{"protocolVersion":1,"operation":"execute_command","workspaceId":"primary","command":"ls","maxOutputBytes":10}`)
	for _, c := range []struct {
		rest string
		want bool
	}{
		{`"exitCode":0,"stdout":"ok","stderr":"","truncated":false,"timedOut":false`, true},
		{`"exitCode":null,"signal":"SIGKILL","stdout":"","stderr":"","truncated":false,"timedOut":false`, true},
		{`"exitCode":null,"stdout":"","stderr":"","truncated":false,"timedOut":true`, true},
		{`"exitCode":null,"stdout":"","stderr":"","truncated":false,"timedOut":false`, false},
		{`"exitCode":1,"signal":"SIGTERM","stdout":"","stderr":"","truncated":false,"timedOut":false`, false},
		{`"exitCode":256,"stdout":"","stderr":"","truncated":false,"timedOut":false`, false},
		{`"exitCode":0,"stdout":"0123456789x","stderr":"","truncated":false,"timedOut":false`, false},
	} {
		if got := ValidateWorkspaceResult(exec, res("execute_command", c.rest), false); got != c.want {
			t.Errorf("exec %s: %v", c.rest, got)
		}
	}
	write := wsReq(t, `{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"n","content":"héllo","overwrite":false}`)
	cases = append(cases,
		struct {
			req  *WorkspaceRequest
			res  *Object
			want bool
		}{write, res("write_file", `"path":"n","created":true,"bytesWritten":6`), true},
		struct {
			req  *WorkspaceRequest
			res  *Object
			want bool
		}{write, res("write_file", `"path":"n","created":false,"bytesWritten":6`), false},
	)
	prev := wsReq(t, `{"protocolVersion":1,"operation":"preview_edit","workspaceId":"primary","path":"n","oldText":"a","newText":"b"}`)
	cases = append(cases, struct {
		req  *WorkspaceRequest
		res  *Object
		want bool
	}{prev, res("preview_edit", `"path":"n","content":"b","hasUtf8Bom":true,"baseSha256":"`+strings.Repeat("0", 64)+`","replacements":1,"bytesWritten":4`), true})
	for i, c := range cases {
		if got := ValidateWorkspaceResult(c.req, c.res, true); got != c.want {
			t.Errorf("case %d (%s): got %v", i, c.req.Operation, got)
		}
	}
}
