package runner

import (
	"strings"
	"testing"
)

// TestPistonNames: Piston's language names and aliases select the same interpreter as codellm's names.
func TestPistonNames(t *testing.T) {
	tr := newRunner(t, nil)
	for _, c := range []struct{ lang, version, stdout string }{
		{"py3", "3", "py\n"}, {"python", ">=3", "py\n"}, {"Python3", "^3", "py\n"}, {"python", "3 || 2", "py\n"},
		{"javascript", "*", "js\n"}, {"node-js", "*", "js\n"}, {"node-javascript", ">=1", "js\n"}, {"node", "*", "js\n"}, {"js", "*", "js\n"},
		{"sh", "*", "sh\n"},
	} {
		src := map[string]string{"py\n": "print('py')", "js\n": "console.log('js')", "sh\n": "echo sh"}[c.stdout]
		req := code(c.lang, src)
		req.Version = c.version
		resp, err := tr.Execute(t.Context(), "", req)
		if err != nil || resp.Run.Stdout != c.stdout {
			t.Fatalf("%s %s: %v %+v", c.lang, c.version, err, resp)
		}
		if c.stdout == "js\n" && resp.Language != "javascript" {
			t.Fatalf("%s answered as language %q, Piston says javascript", c.lang, resp.Language)
		}
	}
	req := code("python", "print(1)")
	req.Version = "<3"
	if _, err := tr.Execute(t.Context(), "", req); err == nil || !strings.Contains(err.Error(), "python-<3 runtime is unknown") {
		t.Fatalf("version no runtime satisfies: %v", err)
	}
}

// TestLibreChatLeniency: "./name", duplicate names (the later wins), lower-case env var names and
// limits above the maximum (clamped) are accepted, as LibreChat's runner accepts them.
func TestLibreChatLeniency(t *testing.T) {
	tr := newRunner(t, nil)
	req := ExecuteRequest{Language: "bash", Version: "*", Files: []File{
		{Name: "./main.sh", Content: ptr("cat data.txt; echo \"$lower_name\"")},
		{Name: "data.txt", Content: ptr("old\n")},
		{Name: "./data.txt", Content: ptr("new\n")},
	}, EnvVars: map[string]string{"lower_name": "ok"}, RunTimeout: ptr(float64(1 << 40)), RunCPUTime: ptr(float64(1 << 40))}
	resp, err := tr.Execute(t.Context(), "", req)
	if err != nil || resp.Run.Stdout != "new\nok\n" {
		t.Fatalf("lenient request: %v %+v", err, resp)
	}
}

// TestFilesOutSkipsBytecode: importing a module beside the program writes __pycache__/*.pyc, which is
// not a file the program made.
func TestFilesOutSkipsBytecode(t *testing.T) {
	tr := newRunner(t, nil)
	resp, err := tr.Execute(t.Context(), "s-pyc", ExecuteRequest{Language: "python", Version: "*", Files: []File{
		{Name: "main.py", Content: ptr("import helper\nopen('out.txt','w').write(helper.X)\nopen('stray.pyc','wb').write(b'x')")},
		{Name: "helper.py", Content: ptr("X = 'y'")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Files) != 1 || resp.Files[0].Name != "out.txt" {
		t.Fatalf("files out %+v, want out.txt only", resp.Files)
	}
}
