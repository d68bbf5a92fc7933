package contract

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// call is the expected form of one tool call: the exact compact bytes and, separately, the parsed
// arguments, so a failure says whether the content or only the encoding changed.
type call struct {
	name string
	args string // exact Arguments bytes
	want map[string]string
}

func fin(answer string) call {
	b, _ := json.Marshal(map[string]string{"answer": answer})
	return call{name: "finish", args: string(b), want: map[string]string{"answer": answer}}
}

func TestGoldenParseToolCalls(t *testing.T) {
	tests := []struct {
		name   string
		stdout string
		calls  []call
	}{
		// G1
		{"G1 one write", `{"changes":[{"path":"a.md","content":"x"}],"answer":"ok"}`, []call{
			{"write_note", `{"path":"a.md","content":"x"}`, map[string]string{"path": "a.md", "content": "x"}},
			fin("ok")}},
		// G2
		{"G2 patch", `{"changes":[{"path":"b.md","find":"@todo","replace":"@done"}]}`, []call{
			{"patch_note", `{"path":"b.md","find":"@todo","replace":"@done"}`,
				map[string]string{"path": "b.md", "find": "@todo", "replace": "@done"}},
			fin("")}},
		{"G2 replace-only", `{"changes":[{"path":"b.md","replace":"tail"}]}`, []call{
			{"patch_note", `{"path":"b.md","find":"","replace":"tail"}`,
				map[string]string{"path": "b.md", "find": "", "replace": "tail"}},
			fin("")}},
		{"G2 content and find", `{"changes":[{"path":"b.md","content":"ignored","find":"x"}]}`, []call{
			{"patch_note", `{"path":"b.md","find":"x","replace":""}`,
				map[string]string{"path": "b.md", "find": "x", "replace": ""}},
			fin("")}},
		{"G2 mixed in change order", `{"changes":[{"path":"a.md","content":"1"},{"path":"b.md","find":"f","replace":"r"},` +
			`{"path":"c.md","content":""},{"path":"d.md","find":"g","replace":null}],"answer":"mixed"}`, []call{
			{"write_note", `{"path":"a.md","content":"1"}`, map[string]string{"path": "a.md", "content": "1"}},
			{"patch_note", `{"path":"b.md","find":"f","replace":"r"}`, map[string]string{"path": "b.md", "find": "f", "replace": "r"}},
			{"write_note", `{"path":"c.md","content":""}`, map[string]string{"path": "c.md", "content": ""}},
			{"patch_note", `{"path":"d.md","find":"g","replace":""}`, map[string]string{"path": "d.md", "find": "g", "replace": ""}},
			fin("mixed")}},
		{"§10.1 example", `{"changes":[{"path":"notes/a.md","content":"hello\n"},{"path":"boards/s.md","find":"@todo","replace":"@done"}],
 "answer":"done"}`, []call{
			{"write_note", `{"path":"notes/a.md","content":"hello\n"}`, map[string]string{"path": "notes/a.md", "content": "hello\n"}},
			{"patch_note", `{"path":"boards/s.md","find":"@todo","replace":"@done"}`,
				map[string]string{"path": "boards/s.md", "find": "@todo", "replace": "@done"}},
			fin("done")}},
		{"no HTML escaping", `{"changes":[{"path":"a&b.md","content":"<p>x & y</p>"}],"answer":"<ok>"}`, []call{
			{"write_note", `{"path":"a&b.md","content":"<p>x & y</p>"}`, map[string]string{"path": "a&b.md", "content": "<p>x & y</p>"}},
			{"finish", `{"answer":"<ok>"}`, map[string]string{"answer": "<ok>"}}}},
		{"null fields are absent, unknown keys ignored", `{"changes":[{"path":"a.md","content":null,"find":null,"mode":5}],"answer":null,"extra":[1]}`, []call{
			{"write_note", `{"path":"a.md","content":""}`, map[string]string{"path": "a.md", "content": ""}},
			fin("")}},
		{"keys are case-sensitive", `{"Answer":"no","changes":[{"path":"a.md","Content":"no"}]}`, []call{
			{"write_note", `{"path":"a.md","content":""}`, map[string]string{"path": "a.md", "content": ""}},
			fin("")}},
		// Backslashes are no longer verbatim (issue 14 item 7: "C:\x" must not become a write_note).
		{"dot segments other than .. pass verbatim", `{"changes":[{"path":"./a/b..md/.../..c//d","content":"x"}]}`, []call{
			{"write_note", `{"path":"./a/b..md/.../..c//d","content":"x"}`, map[string]string{"path": `./a/b..md/.../..c//d`, "content": "x"}},
			fin("")}},
		// G3
		{"G3 empty object", `{}`, []call{fin("")}},
		{"G3 null", `null`, []call{fin("")}},
		{"G3 null in blank lines", "\n null \n\n", []call{fin("")}},
		{"G3 empty answer", `{"answer":""}`, []call{fin("")}},
		{"G3 blank lines around", "\n\n  {\"answer\":\"hi\"}\r\n\n\t", []call{fin("hi")}},
		{"G3 changes null", `{"changes":null,"answer":"a"}`, []call{fin("a")}},
		{"G3 changes empty", `{"changes":[],"answer":"a"}`, []call{fin("a")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Parse([]byte(tc.stdout))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			calls := out.ToolCalls()
			if len(calls) != len(tc.calls) {
				t.Fatalf("got %d calls %+v, want %d", len(calls), calls, len(tc.calls))
			}
			for i, c := range calls {
				w := tc.calls[i]
				if wantID := "call_" + string(rune('0'+i)); c.ID != wantID {
					t.Errorf("call %d id = %q, want %q", i, c.ID, wantID)
				}
				if c.Name != w.name {
					t.Errorf("call %d name = %q, want %q", i, c.Name, w.name)
				}
				var got map[string]string
				if err := json.Unmarshal([]byte(c.Arguments), &got); err != nil {
					t.Fatalf("call %d arguments %q: %v", i, c.Arguments, err)
				}
				if !reflect.DeepEqual(got, w.want) {
					t.Errorf("call %d parsed arguments = %v, want %v", i, got, w.want)
				}
				if c.Arguments != w.args {
					t.Errorf("call %d arguments bytes = %s, want %s", i, c.Arguments, w.args)
				}
			}
		})
	}
}

func TestGoldenBadOutput(t *testing.T) {
	long := `print ` + strings.Repeat("x", 300) + "\n{}"
	tests := []struct {
		name, stdout, msg string
		change            int
	}{
		// G4
		{"print before JSON", "hello\n{\"answer\":\"ok\"}",
			`bad output: stdout is not a single JSON value: invalid character 'h' looking for beginning of value (got: "hello\n{\"answer\":\"ok\"}")`, -1},
		{"empty stdout", "",
			`bad output: stdout is not a single JSON value: stdout is empty (got: "")`, -1},
		{"whitespace only", " \n",
			`bad output: stdout is not a single JSON value: stdout is empty (got: " \n")`, -1},
		{"second value", "{}\n{}\n",
			`bad output: stdout is not a single JSON value: unexpected data after the value at offset 3 (got: "{}\n{}\n")`, -1},
		{"print after JSON", "{\"answer\":\"ok\"}\ndone\n",
			`bad output: stdout is not a single JSON value: unexpected data after the value at offset 16 (got: "{\"answer\":\"ok\"}\ndone\n")`, -1},
		{"truncated JSON", `{"answer":"ok"`,
			`bad output: stdout is not a single JSON value: unexpected EOF (got: "{\"answer\":\"ok\"")`, -1},
		{"snippet is capped", long,
			`bad output: stdout is not a single JSON value: invalid character 'p' looking for beginning of value (got: "print ` + strings.Repeat("x", 194) + `"…)`, -1},
		{"answer number", `{"answer":1}`, `bad output: answer must be a string or null, got number`, -1},
		{"top-level array", `[]`, `bad output: stdout must be a JSON object, got array`, -1},
		{"top-level string", `"ok"`, `bad output: stdout must be a JSON object, got string`, -1},
		{"changes object", `{"changes":{"path":"a.md"}}`, `bad output: changes must be an array or null, got object`, -1},
		{"change not object", `{"changes":[{"path":"a.md"},"b.md"]}`, `bad output: change[1]: must be an object, got string`, 1},
		{"content number", `{"changes":[{"path":"a.md","content":3}]}`, `bad output: change[0]: content must be a string or null, got number`, 0},
		{"find bool", `{"changes":[{"path":"a.md","find":true}]}`, `bad output: change[0]: find must be a string or null, got boolean`, 0},
		{"path empty", `{"changes":[{"path":"a.md","content":"x"},{"path":"","content":"x"}]}`, `bad output: change[1]: missing path`, 1},
		{"path absent", `{"changes":[{"content":"x"}]}`, `bad output: change[0]: missing path`, 0},
		{"path null", `{"changes":[{"path":null,"content":"x"}]}`, `bad output: change[0]: missing path`, 0},
		{"path dotdot", `{"changes":[{"path":"../x.md","content":"x"}]}`,
			`bad output: change[0]: invalid path "../x.md": must be a relative slash path without ".."`, 0},
		{"path inner dotdot", `{"changes":[{"path":"a/../../x.md","content":"x"}]}`,
			`bad output: change[0]: invalid path "a/../../x.md": must be a relative slash path without ".."`, 0},
		{"path trailing dotdot", `{"changes":[{"path":"a/..","content":"x"}]}`,
			`bad output: change[0]: invalid path "a/..": must be a relative slash path without ".."`, 0},
		{"path absolute", `{"changes":[{"path":"/etc/x","content":"x"}]}`,
			`bad output: change[0]: invalid path "/etc/x": must be a relative slash path without ".."`, 0},
		{"path NUL", `{"changes":[{"path":"a\u0000.md","content":"x"}]}`,
			`bad output: change[0]: invalid path "a\x00.md": must be a relative slash path without ".."`, 0},
		// Red-team item 7: Windows forms became write_note calls a Windows client resolves outside its root.
		{"path backslash drive", `{"changes":[{"path":"C:\\x","content":"x"}]}`,
			`bad output: change[0]: invalid path "C:\\x": must be a relative slash path without ".."`, 0},
		{"path backslash dotdot", `{"changes":[{"path":"..\\x.md","content":"x"}]}`,
			`bad output: change[0]: invalid path "..\\x.md": must be a relative slash path without ".."`, 0},
		{"path drive relative", `{"changes":[{"path":"c:x.md","content":"x"}]}`,
			`bad output: change[0]: invalid path "c:x.md": must be a relative slash path without ".."`, 0},
		{"path drive slash", `{"changes":[{"path":"D:/x.md","content":"x"}]}`,
			`bad output: change[0]: invalid path "D:/x.md": must be a relative slash path without ".."`, 0},
		{"first bad change wins", `{"changes":[{"path":"ok.md"},{"path":"/a"},{"path":""}]}`,
			`bad output: change[1]: invalid path "/a": must be a relative slash path without ".."`, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Parse([]byte(tc.stdout))
			if err == nil {
				t.Fatalf("Parse accepted %q: %+v", tc.stdout, out)
			}
			if out != nil {
				t.Errorf("Parse returned output with an error: %+v", out)
			}
			if err.Error() != tc.msg {
				t.Errorf("error =\n  %s\nwant\n  %s", err, tc.msg)
			}
			var bad *BadOutputError
			if !errors.As(err, &bad) || !errors.Is(err, ErrBadOutput) {
				t.Fatalf("error %T is not a *BadOutputError matching ErrBadOutput", err)
			}
			if bad.Change != tc.change {
				t.Errorf("Change = %d, want %d", bad.Change, tc.change)
			}
		})
	}
}

func TestCallIDsBeyondTen(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"changes":[`)
	for i := range 11 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"path":"n.md","content":"x"}`)
	}
	b.WriteString(`]}`)
	out, err := Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	calls := out.ToolCalls()
	if len(calls) != 12 || calls[10].ID != "call_10" || calls[11].ID != "call_11" || calls[11].Name != "finish" {
		t.Fatalf("calls = %+v", calls)
	}
}

func TestGuardCall(t *testing.T) {
	c := FinishCall(GuardAnswer)
	want := `{"answer":"codellm: run already completed; nothing was executed again"}`
	if c.ID != "call_0" || c.Name != "finish" || c.Arguments != want {
		t.Fatalf("guard call = %+v", c)
	}
}

var fullTools = []string{"search", "read_note", "write_note", "patch_note", "finish"}

func TestToolChecks(t *testing.T) {
	mixed, err := Parse([]byte(`{"changes":[{"path":"a.md","content":"x"},{"path":"b.md","find":"f","replace":"r"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	patchOnly, _ := Parse([]byte(`{"changes":[{"path":"b.md","find":"f","replace":"r"}]}`))
	none, _ := Parse([]byte(`{}`))

	tests := []struct {
		name    string
		offered []string
		out     *Output
		pre     string // RequireFinish error, "" for none
		post    string // CheckTools error, "" for none
	}{
		{"tools absent", nil, mixed, "", ""},
		{"all offered", fullTools, mixed, "", ""},
		{"G9 lacking patch_note", []string{"search", "read_note", "write_note", "finish"}, mixed, "",
			`the role needs tool "patch_note" but the request's tools do not offer it (offered: search, read_note, write_note, finish)`},
		{"lacking write_note", []string{"patch_note", "finish"}, mixed, "",
			`the role needs tool "write_note" but the request's tools do not offer it (offered: patch_note, finish)`},
		{"lacking write_note, unused", []string{"patch_note", "finish"}, patchOnly, "", ""},
		{"only finish, no changes", []string{"finish"}, none, "", ""},
		{"G9 lacking finish", []string{"search", "write_note"}, none,
			`the role needs tool "finish" but the request's tools do not offer it (offered: search, write_note)`,
			`the role needs tool "finish" but the request's tools do not offer it (offered: search, write_note)`},
		{"tools without function names", []string{}, none,
			`the role needs tool "finish" but the request's tools do not offer it (offered: )`,
			`the role needs tool "finish" but the request's tools do not offer it (offered: )`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what string, err error, want string) {
				t.Helper()
				if want == "" {
					if err != nil {
						t.Errorf("%s: unexpected error %v", what, err)
					}
					return
				}
				var mt *MissingToolError
				if !errors.As(err, &mt) || !errors.Is(err, ErrMissingTool) {
					t.Fatalf("%s: error %v (%T) is not a *MissingToolError", what, err, err)
				}
				if err.Error() != want {
					t.Errorf("%s: error =\n  %s\nwant\n  %s", what, err, want)
				}
			}
			check("RequireFinish", RequireFinish(tc.offered), tc.pre)
			check("CheckTools", CheckTools(tc.offered, tc.out), tc.post)
		})
	}
}
