package runner

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/wire"
)

func TestMultiFilePrograms(t *testing.T) {
	tr := newRunner(t, nil)
	cases := []struct {
		name string
		req  ExecuteRequest
		want string
	}{
		{"python package import", ExecuteRequest{Language: "python", Version: "*", Files: []File{
			{Name: "main.py", Content: ptr("from pkg.util import twice\nprint(twice(21))\n")},
			{Name: "pkg/__init__.py", Content: ptr("")},
			{Name: "pkg/util.py", Content: ptr("def twice(x):\n    return 2 * x\n")},
		}}, "42\n"},
		{"node require", ExecuteRequest{Language: "node", Version: "*", Files: []File{
			{Name: "index.js", Content: ptr("console.log(require('./lib/m.js').v)")},
			{Name: "lib/m.js", Content: ptr("module.exports = {v: 'from lib'}")},
		}}, "from lib\n"},
		{"bash source and data file", ExecuteRequest{Language: "bash", Version: "*", Files: []File{
			{Name: "run.sh", Content: ptr(". ./funcs.sh\ngreet \"$(cat data/name.txt)\"")},
			{Name: "funcs.sh", Content: ptr("greet() { echo \"hi $1\"; }")},
			{Name: "data/name.txt", Content: ptr("bob")},
		}}, "hi bob\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr.t = t
			resp := tr.exec("", c.req)
			if resp.Run.Stdout != c.want || resp.Run.Code == nil || *resp.Run.Code != 0 {
				t.Fatalf("stdout %q stderr %q code %v, want %q", resp.Run.Stdout, resp.Run.Stderr, resp.Run.Code, c.want)
			}
		})
	}
}

func TestStdinArgsEnv(t *testing.T) {
	tr := newRunner(t, nil)
	req := code("python", "import sys, os\nprint(sys.stdin.read().upper(), end='')\nprint(sys.argv[1:])\nprint(os.environ['GREETING'], os.environ['HOME'] == os.getcwd())")
	req.Stdin = ptr("abc\n")
	req.Args = []string{"x", "y z", ""}
	req.EnvVars = map[string]string{"GREETING": "hello"}
	resp := tr.exec("", req)
	want := "ABC\n['x', 'y z', '']\nhello True\n"
	if resp.Run.Stdout != want {
		t.Fatalf("stdout %q stderr %q, want %q", resp.Run.Stdout, resp.Run.Stderr, want)
	}
	// No stdin: Piston's single newline, then EOF, not a hang.
	resp = tr.exec("", code("python", "import sys; print(repr(sys.stdin.read()))"))
	if resp.Run.Stdout != "'\\n'\n" {
		t.Fatalf("empty stdin: stdout %q stderr %q", resp.Run.Stdout, resp.Run.Stderr)
	}
}

func TestErrors(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.MaxBodyBytes = 4096; c.MaxRunTimeout = 5 * time.Second; c.MaxMemory = 256 << 20 })
	ok := `"language":"bash","version":"*","files":[{"content":"echo"}]`
	cases := []struct {
		name   string
		body   string
		ctype  string
		hdr    map[string]string
		status int
		msg    string // substring of message
		code   string // "error" member
	}{
		{"content type", `{` + ok + `}`, "text/plain", nil, 415, `requests must be of type application/json (Piston's rule), got Content-Type "text/plain"`, ""},
		{"not json", `{"language":`, "", nil, 400, "invalid JSON", ""},
		{"not an object", `[1]`, "", nil, 400, "must be a JSON object", ""},
		{"trailing data", `{` + ok + `} {}`, "", nil, 400, "trailing data", ""},
		{"wrong type", `{"language":"bash","version":"*","files":[{"content":"echo"}],"run_timeout":"5"}`, "", nil, 400, "run_timeout must be a number", ""},
		{"env value type", `{` + ok + `,"env_vars":{"A":1}}`, "", nil, 400, "env_vars values must be strings, got JSON number", ""},
		{"env type", `{` + ok + `,"env_vars":"A=1"}`, "", nil, 400, "env_vars must be an object, got JSON string", ""},
		{"files type", `{"language":"bash","version":"*","files":{}}`, "", nil, 400, "files must be an array, got JSON object", ""},
		{"missing language", `{"version":"*","files":[{"content":"echo"}]}`, "", nil, 400, "language is required", ""},
		{"missing version", `{"language":"bash","files":[{"content":"echo"}]}`, "", nil, 400, "version is required", ""},
		{"no files", `{"language":"bash","version":"*","files":[]}`, "", nil, 400, "at least one file", ""},
		{"no content", `{"language":"bash","version":"*","files":[{"name":"a.sh"}]}`, "", nil, 400, "files[0]: content is required", ""},
		{"file reference", `{"language":"bash","version":"*","files":[{"id":"abc","storage_session_id":"s"}]}`, "", nil, 400, "not supported by this runner", ""},
		{"bad base64", `{"language":"bash","version":"*","files":[{"content":"!!","encoding":"base64"}]}`, "", nil, 400, "not valid base64", ""},
		{"bad hex", `{"language":"bash","version":"*","files":[{"content":"zz","encoding":"hex"}]}`, "", nil, 400, "not valid hex", ""},
		{"escaping name", `{"language":"bash","version":"*","files":[{"name":"../x.sh","content":"echo"}]}`, "", nil, 400, "escapes the workspace", ""},
		{"unclean name", `{"language":"bash","version":"*","files":[{"name":"a//b.sh","content":"echo"}]}`, "", nil, 400, "must be a clean path", ""},
		{"absolute name", `{"language":"bash","version":"*","files":[{"name":"/etc/x","content":"echo"}]}`, "", nil, 400, "must be relative", ""},
		{"scratch name", `{"language":"bash","version":"*","files":[{"name":"tmp/x","content":"echo"}]}`, "", nil, 400, "reserved scratch", ""},
		{"file as dir", `{"language":"bash","version":"*","files":[{"name":"a","content":"echo"},{"name":"a/b","content":""}]}`, "", nil, 400, "uses it as a directory", ""},
		{"bad cache key", `{"language":"bash","version":"*","files":[{"content":"echo","input_cache_key":"XYZ"}]}`, "", nil, 400, "input_cache_key", ""},
		{"timeout negative", `{` + ok + `,"run_timeout":-0.5}`, "", nil, 400, "run_timeout must be non-negative", ""},
		{"memory over max", `{` + ok + `,"run_memory_limit":268435457}`, "", nil, 400, "run_memory_limit cannot exceed the configured limit of 268435456 bytes", ""},
		{"memory too small", `{` + ok + `,"run_memory_limit":1000}`, "", nil, 400, "run_memory_limit must be -1 or at least", ""},
		{"compile memory", `{` + ok + `,"compile_memory_limit":-5}`, "", nil, 400, "compile_memory_limit must be -1", ""},
		{"env bad name", `{` + ok + `,"env_vars":{"1x":"x"}}`, "", nil, 400, `env_vars: name "1x" must match`, ""},
		{"env reserved", `{` + ok + `,"env_vars":{"PATH":"/evil"}}`, "", nil, 400, "env_vars: PATH is reserved", ""},
		{"env reserved input", `{` + ok + `,"env_vars":{"CODELLM_INPUT":"x"}}`, "", nil, 400, "env_vars: CODELLM_INPUT is reserved", ""},
		{"args NUL", `{` + ok + `,"args":["a\u0000b"]}`, "", nil, 400, "args[0] contains a NUL byte", ""},
		{"unknown language", `{"language":"kotlin","version":"*","files":[{"content":"x"}]}`, "", nil, 400, "kotlin-* runtime is unknown", ""},
		{"unknown version", `{"language":"bash","version":"1.2.3","files":[{"content":"x"}]}`, "", nil, 400, "bash-1.2.3 runtime is unknown", ""},
		{"too large", `{` + ok + `,"stdin":"` + strings.Repeat("x", 5000) + `"}`, "", nil, 413, "larger than 4096 bytes", ""},
		{"bad session id", `{` + ok + `}`, "", map[string]string{wire.RuntimeSessionHeader: "has space"}, 400, "printable ASCII", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr.t = t
			hdr := map[string]string{}
			for k, v := range c.hdr {
				hdr[k] = v
			}
			if c.ctype != "" {
				hdr["Content-Type"] = c.ctype
			}
			status, body, _ := tr.do(http.MethodPost, PathExecute, c.body, hdr)
			msg, _ := body["message"].(string)
			if status != c.status || !strings.Contains(msg, c.msg) {
				t.Fatalf("got %d %v, want %d with message containing %q", status, body, c.status, c.msg)
			}
			if e, _ := body["error"].(string); e != c.code {
				t.Fatalf("error member %q, want %q", e, c.code)
			}
		})
	}
	if n := tr.Sessions(); n != 0 {
		t.Fatalf("invalid requests created %d sessions", n)
	}
}

// TestErrorsGoAPI checks that in-process callers get typed errors carrying the HTTP status.
func TestErrorsGoAPI(t *testing.T) {
	tr := newRunner(t, nil)
	_, err := tr.Execute(context.Background(), "", code("cobol", "x"))
	var e *Error
	if !errors.As(err, &e) || e.Status != 400 || !errors.Is(err, ErrUnknownRuntime) {
		t.Fatalf("unknown language: %v (%T)", err, err)
	}
	_, err = tr.Execute(context.Background(), "", ExecuteRequest{Language: "bash", Version: "*"})
	if !errors.Is(err, ErrBadRequest) || !errors.As(err, &e) || e.Status != 400 {
		t.Fatalf("no files: %v", err)
	}
}

func TestBusy(t *testing.T) {
	tr := newRunner(t, nil)
	// Hold every slot of the pool; an execute must give up with 429 after the queue timeout.
	var releases []func()
	for range tr.pool.Size() {
		rel, _, err := tr.pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, rel)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the queue timeout is 5 s; a canceled caller must not wait for it
	_, err := tr.Execute(ctx, "", code("bash", "echo hi"))
	if !errors.Is(err, ErrCanceled) {
		t.Fatalf("canceled caller: %v", err)
	}
	for _, rel := range releases {
		rel()
	}

	busy := newRunner(t, nil)
	busy.cfg.Slots = newPool(1, 50*time.Millisecond)
	rel, _, _ := busy.cfg.Slots.Acquire(context.Background())
	defer rel()
	status, body, hdr := busy.do(http.MethodPost, PathExecute, code("bash", "echo hi"), nil)
	if status != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body["message"].(string), "slots are busy") {
		t.Fatalf("got %d %v %v, want 429 with Retry-After", status, body, hdr)
	}
}

func TestSessionPersistence(t *testing.T) {
	tr := newRunner(t, nil)
	hdr := map[string]string{wire.RuntimeSessionHeader: "sess-1"}
	status, body, _ := tr.do(http.MethodPost, PathExecute,
		code("bash", "echo one > state.txt; mkdir -p sub; echo two > sub/more.txt; (sleep 1; echo late > late.txt) & echo started"), hdr)
	if status != 200 {
		t.Fatalf("first execute: %d %v", status, body)
	}
	time.Sleep(1500 * time.Millisecond) // the background writer would have written late.txt by now
	status, body, _ = tr.do(http.MethodPost, PathExecute,
		code("python", "import os\nprint(open('state.txt').read().strip(), open('sub/more.txt').read().strip(), os.path.exists('late.txt'))"), hdr)
	run := body["run"].(map[string]any)
	if status != 200 || run["stdout"] != "one two False\n" {
		t.Fatalf("second execute: %d %v", status, body)
	}
	if tr.Sessions() != 1 {
		t.Fatalf("sessions = %d, want 1", tr.Sessions())
	}
	// Delete: the workspace is gone and the next execute starts empty.
	s := tr.sessions["sess-1"]
	status, _, _ = tr.do(http.MethodDelete, SessionsPrefix+"sess-1", nil, nil)
	if status != 204 {
		t.Fatalf("delete: %d", status)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("session dir still exists after delete: %v", err)
	}
	status, body, _ = tr.do(http.MethodPost, PathExecute, code("bash", "ls -A | grep -v '^tmp$' | wc -l"), hdr)
	if run := body["run"].(map[string]any); status != 200 || strings.TrimSpace(run["stdout"].(string)) != "1" {
		// one file: the entry point itself
		t.Fatalf("after delete: %d %v", status, body)
	}
	if status, _, _ := tr.do(http.MethodDelete, SessionsPrefix+"never-existed", nil, nil); status != 204 {
		t.Fatalf("delete unknown: %d", status)
	}
}

func TestSessionIsolation(t *testing.T) {
	tr := newRunner(t, nil)
	tr.exec("alice", code("bash", "echo alice-secret > secret.txt"))
	// Bob, and a session-less run, see nothing of Alice's workspace in theirs (walking up the host tree
	// is the sandbox's to prevent: TestSessionIsolationSandbox).
	for _, sid := range []string{"bob", ""} {
		resp := tr.exec(sid, code("bash", "ls -AR; cat secret.txt 2>/dev/null; true"))
		if strings.Contains(resp.Run.Stdout, "secret") {
			t.Fatalf("session %q sees alice's files: %q", sid, resp.Run.Stdout)
		}
		for _, f := range resp.Files {
			if strings.Contains(f.Name, "secret") {
				t.Fatalf("session %q lists alice's file %q", sid, f.Name)
			}
		}
	}
	resp := tr.exec("alice", code("bash", "cat secret.txt"))
	if resp.Run.Stdout != "alice-secret\n" {
		t.Fatalf("alice lost her file: %q %q", resp.Run.Stdout, resp.Run.Stderr)
	}
}

// TestSessionIsolationSandbox is differential: code that knows the absolute path of another session's
// workspace reads it when the sandbox is off, and cannot under the native sandbox.
func TestSessionIsolationSandbox(t *testing.T) {
	probe := func(t *testing.T, tr *testRunner) string {
		tr.exec("alice", code("bash", "echo alice-secret > secret.txt"))
		path := filepath.Join(tr.sessions["alice"].dir, "secret.txt")
		// Both by its exact path and by searching every directory above bob's workspace.
		return tr.exec("bob", code("bash", "cat "+path+" 2>&1; grep -rsl --include=secret.txt alice .. 2>/dev/null; true")).Run.Stdout
	}
	t.Run("off", func(t *testing.T) {
		tr := newRunner(t, func(c *Config) { c.Sandbox = offSandbox(t) })
		if out := probe(t, tr); !strings.HasPrefix(out, "alice-secret\n") || !strings.Contains(out, "secret.txt") {
			t.Fatalf("without the sandbox the probe should read the file (test is not differential): %q", out)
		}
	})
	t.Run("native", func(t *testing.T) {
		sb := native(t)
		tr := newRunner(t, func(c *Config) { c.Sandbox = sb })
		if out := probe(t, tr); strings.Contains(out, "alice-secret") {
			t.Fatalf("bob read alice's file through the native sandbox: %q", out)
		}
	})
}

func TestSessionTTL(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.SessionTTL = 300 * time.Millisecond })
	tr.exec("short", code("bash", "echo x > kept.txt"))
	dir := tr.sessions["short"].dir
	deadline := time.Now().Add(10 * time.Second)
	for tr.Sessions() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("session did not expire")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("expired session's directory remains: %v", err)
	}
	resp := tr.exec("short", code("bash", "cat kept.txt 2>&1 || echo gone"))
	if !strings.HasSuffix(resp.Run.Stdout, "gone\n") {
		t.Fatalf("expired session kept state: %q", resp.Run.Stdout)
	}
}

func TestMaxSessions(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.MaxSessions = 2 })
	tr.exec("a", code("bash", "true"))
	tr.exec("b", code("bash", "true"))
	status, body, hdr := tr.do(http.MethodPost, PathExecute, code("bash", "true"), map[string]string{wire.RuntimeSessionHeader: "c"})
	if status != 429 || body["error"] != CodeTooManySessions || hdr.Get("Retry-After") == "" {
		t.Fatalf("third session: %d %v", status, body)
	}
	// Existing sessions keep working, and deleting one makes room.
	tr.exec("a", code("bash", "true"))
	if err := tr.ResetSession("b"); err != nil {
		t.Fatal(err)
	}
	tr.exec("c", code("bash", "true"))
}

func TestDirtySession(t *testing.T) {
	tr := newRunner(t, nil)
	hdr := map[string]string{wire.RuntimeSessionHeader: "d1"}
	// A clean non-zero exit and a self-inflicted crash leave the session usable.
	tr.exec("d1", code("bash", "echo a > f; exit 7"))
	tr.exec("d1", code("python", "import ctypes; ctypes.string_at(0)"))
	if resp := tr.exec("d1", code("bash", "cat f")); resp.Run.Stdout != "a\n" {
		t.Fatalf("session unusable after a clean failure: %+v", resp.Run)
	}
	// Stopped at the timeout mid-write: the reply says so and the session stays usable.
	req := code("bash", "echo partial; while true; do echo x >> f; done")
	req.RunTimeout = ptr[float64](300)
	resp := tr.exec("d1", req)
	if resp.Run.Status == nil || *resp.Run.Status != StatusTimeout || resp.Run.Stdout != "partial\n" {
		t.Fatalf("timeout run: %+v", resp.Run)
	}
	if resp := tr.exec("d1", code("bash", "head -c 2 f")); resp.Run.Stdout != "a\n" {
		t.Fatalf("session unusable after a timeout: %+v", resp.Run)
	}
	// Killed because the caller went away: nobody got a reply, the next execute is 409.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	if _, err := tr.Execute(ctx, "d1", code("bash", "while true; do echo x >> f; done")); !errors.Is(err, ErrCanceled) {
		t.Fatalf("canceled run: %v", err)
	}
	status, body, _ := tr.do(http.MethodPost, PathExecute, code("bash", "cat f"), hdr)
	if status != 409 || body["error"] != wire.CodeSessionWorkspaceDirty || !strings.Contains(body["message"].(string), "killed mid-run") {
		t.Fatalf("after kill: %d %v", status, body)
	}
	_, err := tr.Execute(context.Background(), "d1", code("bash", "true"))
	if !errors.Is(err, ErrSessionDirty) {
		t.Fatalf("Go API after kill: %v", err)
	}
	// Other sessions are unaffected; deleting the dirty one gives a clean, empty workspace.
	tr.exec("d2", code("bash", "true"))
	if err := tr.ResetSession("d1"); err != nil {
		t.Fatal(err)
	}
	if resp := tr.exec("d1", code("bash", "ls f 2>&1 || echo none")); !strings.HasSuffix(resp.Run.Stdout, "none\n") {
		t.Fatalf("after reset: %q", resp.Run.Stdout)
	}

	// Tampering: the workspace directory replaced behind the runner's back.
	tr.exec("d3", code("bash", "true"))
	dir := tr.sessions["d3"].dir
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir + ".moved")
	status, body, _ = tr.do(http.MethodPost, PathExecute, code("bash", "true"), map[string]string{wire.RuntimeSessionHeader: "d3"})
	if status != 409 || !strings.Contains(body["message"].(string), "replaced") {
		t.Fatalf("tampered: %d %v", status, body)
	}
}

// TestSymlinkPlantedByRun: a run leaves a symlink where the next request writes a file; the write must
// replace the link, never write through it to the host file.
func TestSymlinkPlantedByRun(t *testing.T) {
	tr := newRunner(t, nil)
	victim := filepath.Join(t.TempDir(), "victim.txt")
	if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr.exec("s", code("bash", fmt.Sprintf("ln -s %s data.txt; ln -s / rootlink", victim)))
	req := ExecuteRequest{Language: "bash", Version: "*", Files: []File{
		{Name: "main.sh", Content: ptr("cat data.txt")}, {Name: "data.txt", Content: ptr("replaced")}}}
	resp := tr.exec("s", req)
	if resp.Run.Stdout != "replaced" {
		t.Fatalf("stdout %q", resp.Run.Stdout)
	}
	if b, _ := os.ReadFile(victim); string(b) != "original" {
		t.Fatalf("host file written through a planted symlink: %q", b)
	}
	// A parent that is a symlink is refused before anything is written.
	req.Files = []File{{Name: "main.sh", Content: ptr("true")}, {Name: "rootlink/tmp/evil", Content: ptr("x")}}
	_, err := tr.Execute(context.Background(), "s", req)
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("symlinked parent: %v", err)
	}
	if _, err := os.Lstat("/tmp/evil"); err == nil {
		t.Fatal("/tmp/evil was created through a symlink")
	}
}

func TestFilesOut(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.FilesOutMaxBytes = 10; c.FilesOutMaxCount = 3 })
	resp := tr.exec("", code("bash", "printf small > a.txt; printf 0123456789ABC > b.bin; ln -s a.txt link; mkdir d; : > d/empty; echo t > tmp/scratch"))
	if len(resp.Files) != 3 || resp.FilesTruncated {
		t.Fatalf("files %+v truncated %v", resp.Files, resp.FilesTruncated)
	}
	a, b, e := resp.Files[0], resp.Files[1], resp.Files[2]
	if a.Name != "a.txt" || a.Size != 5 || a.Encoding != "base64" || a.Content == nil || mustB64(t, *a.Content) != "small" {
		t.Fatalf("a.txt: %+v", a)
	}
	if b.Name != "b.bin" || b.Size != 13 || b.Content != nil || !b.ContentOmitted {
		t.Fatalf("b.bin over the cap: %+v", b)
	}
	if e.Name != "d/empty" || e.Size != 0 || e.Content == nil || *e.Content != "" {
		t.Fatalf("d/empty: %+v", e)
	}
	resp = tr.exec("", code("bash", "for i in 1 2 3 4 5; do echo $i > f$i; done"))
	if len(resp.Files) != 3 || !resp.FilesTruncated || resp.Files[0].Name != "f1" {
		t.Fatalf("count cap: %+v %v", resp.Files, resp.FilesTruncated)
	}
	// In a session, only what this execute changed is listed.
	tr.exec("fo", code("bash", "echo 1 > old.txt"))
	resp = tr.exec("fo", code("bash", "echo 2 > new.txt; cat old.txt >/dev/null"))
	if len(resp.Files) != 1 || resp.Files[0].Name != "new.txt" {
		t.Fatalf("session files out: %+v", resp.Files)
	}
}

func mustB64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestOutputLimit(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.MaxOutputBytes = 1000 })
	resp := tr.exec("", code("bash", "yes"))
	r := resp.Run
	if r.Status == nil || *r.Status != StatusStdoutLimit || len(r.Stdout) != 1000 || r.Signal == nil {
		t.Fatalf("stdout limit: status %v len %d signal %v msg %v", r.Status, len(r.Stdout), r.Signal, r.Message)
	}
	resp = tr.exec("", code("bash", "yes >&2"))
	r = resp.Run
	if r.Status == nil || *r.Status != StatusStderrLimit || len(r.Stderr) != 1000 {
		t.Fatalf("stderr limit: status %v len %d", r.Status, len(r.Stderr))
	}
}

// TestMemoryLimit is differential: the same allocation succeeds under the maximum and fails under a
// small run_memory_limit.
func TestMemoryLimit(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.MaxMemory = 1 << 30 })
	if tr.cfg.Sandbox.Mode() == "off" {
		native(t) // skips (or fails under CODELLM_REQUIRE_SANDBOX=1): mode off applies no memory limit
	}
	prog := "b = bytearray(100 * 1024 * 1024)\nprint('allocated', len(b))"
	if resp := tr.exec("", code("python", prog)); resp.Run.Stdout != "allocated 104857600\n" {
		t.Fatalf("under 1 GiB: %+v", resp.Run)
	}
	req := code("python", prog)
	req.RunMemoryLimit = ptr[int64](40 << 20)
	resp := tr.exec("", req)
	if resp.Run.Code != nil && *resp.Run.Code == 0 {
		t.Fatalf("allocation of 100 MiB succeeded under a 40 MiB limit: %+v", resp.Run)
	}
}

func TestCPUTimeLimit(t *testing.T) {
	tr := newRunner(t, nil)
	if tr.cfg.Sandbox.Mode() == "off" {
		native(t) // mode off applies no CPU limit
	}
	req := code("bash", "while :; do :; done")
	req.RunCPUTime = ptr[float64](1000)
	req.RunTimeout = ptr[float64](15000)
	resp := tr.exec("", req)
	// Piston's isolate reports a CPU-time kill as TO, like a wall-clock one.
	if resp.Run.Signal == nil || resp.Run.Status == nil || *resp.Run.Status != StatusTimeout ||
		resp.Run.Message == nil || !strings.Contains(*resp.Run.Message, "CPU time limit 1s") {
		t.Fatalf("CPU-bound loop under run_cpu_time 1000: %+v", resp.Run)
	}
	if resp.Run.WallTime >= 15000 {
		t.Fatalf("ended by the wall timeout, not the CPU limit: %+v", resp.Run)
	}
}

func TestResetKillsInFlight(t *testing.T) {
	tr := newRunner(t, nil)
	done := make(chan error, 1)
	go func() {
		_, err := tr.Execute(context.Background(), "r", code("bash", "echo started > s; sleep 30"))
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tr.mu.Lock()
		s := tr.sessions["r"]
		tr.mu.Unlock()
		if s != nil {
			if _, err := os.Stat(filepath.Join(s.dir, "s")); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("execute did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tr.ResetSession("r"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrCanceled) {
			t.Fatalf("in-flight execute: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reset did not end the in-flight execute")
	}
	if tr.Sessions() != 0 {
		t.Fatal("session survived reset")
	}
}

func TestRuntimesAndHealth(t *testing.T) {
	tr := newRunner(t, nil)
	status, body, _ := tr.do(http.MethodGet, PathRuntimes, nil, nil)
	if status != 200 {
		t.Fatalf("runtimes: %d", status)
	}
	langs := map[string]map[string]any{}
	for _, x := range body["array"].([]any) {
		m := x.(map[string]any)
		langs[m["language"].(string)] = m
	}
	py, ok := langs["python"]
	if !ok {
		t.Fatalf("python missing from %v", langs)
	}
	if v := py["version"].(string); !versionRE.MatchString(v) || v == "0.0.0" {
		t.Fatalf("python version %q", v)
	}
	if fmt.Sprint(py["aliases"]) != "[py py3 python3]" {
		t.Fatalf("python aliases %v", py["aliases"])
	}
	// Piston's names: JavaScript is the language, node the runtime providing it.
	if js := langs["javascript"]; js == nil || js["runtime"] != "node" || !strings.Contains(fmt.Sprint(js["aliases"]), "node-js") {
		t.Fatalf("javascript entry %v", js)
	}
	if _, ok := langs["node"]; ok {
		t.Fatal("node is listed as a language, not as javascript's runtime")
	}
	for _, name := range tr.cfg.Programs.Names() {
		if rt, ok := tr.findRuntime(name, "*"); !ok || langs[rt.Language] == nil {
			t.Errorf("enabled program %s not listed", name)
		}
	}
	status, body, _ = tr.do(http.MethodGet, PathHealth, nil, nil)
	if status != 200 || body["status"] != "ok" {
		t.Fatalf("health: %d %v", status, body)
	}
	// Unhealthy when the work directory is gone.
	if err := os.RemoveAll(tr.runsDir); err != nil {
		t.Fatal(err)
	}
	status, body, _ = tr.do(http.MethodGet, PathHealth, nil, nil)
	if status != 503 || body["status"] != "unhealthy" || body["error"] != "workspace_unavailable" {
		t.Fatalf("health without work dir: %d %v", status, body)
	}
}

func TestVersionMatches(t *testing.T) {
	for _, c := range []struct {
		inst, sel string
		want      bool
	}{
		{"3.11.2", "*", true}, {"3.11.2", "3.11.2", true}, {"3.11.2", "v3.11.2", true}, {"3.11.2", "3", true},
		{"3.11.2", "3.x", true}, {"3.11.2", "3.11.x", true}, {"3.11.2", "3.11", true}, {"3.11.2", "3.10", false},
		{"3.11.2", "2", false}, {"3.11.2", "3.11.2.1", false}, {"3.11.2", "3.1", false},
		// node-semver ranges, as Piston matches them.
		{"3.11.2", ">=3", true}, {"3.11.2", ">3", false}, {"3.11.2", ">3.10", true}, {"3.11.2", "<3.11", false},
		{"3.11.2", "<=3.11", true}, {"3.11.2", "^3", true}, {"3.11.2", "^3.12", false}, {"3.11.2", "^2", false},
		{"0.2.5", "^0.2.3", true}, {"0.3.0", "^0.2.3", false}, {"0.0.3", "^0.0.3", true}, {"0.0.4", "^0.0.3", false},
		{"3.11.2", "~3.11", true}, {"3.12.0", "~3.11", false}, {"3.11.2", "~3.11.3", false}, {"3.11.2", "~3", true},
		{"3.11.2", "3 || 2", true}, {"2.7.18", "3 || 2", true}, {"1.0.0", "3 || 2", false},
		{"3.11.2", ">=3.8 <3.12", true}, {"3.12.1", ">=3.8 <3.12", false}, {"3.11.2", "3.8 - 3.11", true},
		{"3.12.0", "3.8 - 3.11", false}, {"3.11.2", "> 3.10", true}, {"3.11.2", "~>3.11", true},
		{"3.11.2", "latest", false}, {"3.11.2", ">=x.y", false}, {"3.11.2", "<*", false},
	} {
		if got := versionMatches(c.inst, c.sel); got != c.want {
			t.Errorf("versionMatches(%q, %q) = %v, want %v", c.inst, c.sel, got, c.want)
		}
	}
}

func TestCloseKillsAndCleans(t *testing.T) {
	tr := newRunner(t, nil)
	tr.exec("keep", code("bash", "echo x > f"))
	done := make(chan error, 1)
	go func() {
		_, err := tr.Execute(context.Background(), "", code("bash", "sleep 30"))
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	tr.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("execute in flight at Close succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the in-flight execute")
	}
	if _, err := os.Stat(tr.dir); !os.IsNotExist(err) {
		t.Fatalf("work dir remains: %v", err)
	}
	if _, err := tr.Execute(context.Background(), "", code("bash", "true")); !errors.Is(err, ErrClosed) {
		t.Fatalf("execute after Close: %v", err)
	}
}
