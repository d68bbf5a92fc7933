package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestStrictRequests(t *testing.T) {
	e := newEnv(t, Options{AllowWrites: true})
	e.write("a.txt", "a")
	bad := []string{
		`{"path":"a.txt","bogus":1}`,
		`{"Path":"a.txt"}`,
		`{"path":"a.txt","path":"a.txt"}`,
		`{"path":null}`,
		`null`,
		`[]`,
		`"a.txt"`,
		`{"path":"a.txt"} {}`,
		`{"path":1}`,
		`{"path":"a.txt","maxLines":"5"}`,
		`{"path":"a.txt","protocolVersion":2}`,
		`{"path":"a.txt","operation":"write_file"}`,
		`{"path":"a.txt","workspaceId":"bad id"}`,
		`{"path":"a.txt"`,
		``,
	}
	for _, req := range bad {
		e.fail(OpReadFile, req, CodeInvalidRequest)
	}
	e.ok(OpReadFile, `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"a.txt"}`)
	e.fail("delete_everything", `{}`, CodeInvalidRequest)
	e.fail(OpWriteFile, `{"path":"b.txt","content":"x","overwrite":"no"}`, CodeInvalidRequest)
	e.fail(OpEditFile, `{"path":"a.txt","edits":{"oldText":"a","newText":"b"}}`, CodeInvalidRequest)
	// The result JSON uses exactly the spec's field names.
	out, err := e.ws.Do(context.Background(), OpReadFile, json.RawMessage(`{"path":"a.txt"}`))
	if err != nil || string(out) != `{"path":"a.txt","content":"a","startLine":1,"endLine":1,"truncated":false}` {
		t.Errorf("read_file result: %s %v", out, err)
	}
}

func TestOpenRegistration(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home", "user")
	os.MkdirAll(home, 0o755)
	os.MkdirAll(filepath.Join(base, "ws"), 0o755)
	os.WriteFile(filepath.Join(base, "file"), nil, 0o644)

	expectInvalid := func(root string, opts Options) {
		t.Helper()
		ws, err := Open(root, opts)
		if !errors.Is(err, ErrRegistrationInvalid) {
			if ws != nil {
				ws.Close()
			}
			t.Errorf("Open(%q) = %v, want REGISTRATION_INVALID", root, err)
		}
	}
	expectInvalid("", Options{HomeDir: home})
	expectInvalid(filepath.Join(base, "missing"), Options{HomeDir: home})
	expectInvalid(filepath.Join(base, "file"), Options{HomeDir: home})
	expectInvalid(home, Options{HomeDir: home})
	expectInvalid(filepath.Join(base, "home"), Options{HomeDir: home})
	expectInvalid(base, Options{HomeDir: home})
	expectInvalid("/", Options{HomeDir: home})
	// A symlink to an ancestor of home is seen through.
	os.Symlink(filepath.Join(base, "home"), filepath.Join(base, "homelink"))
	expectInvalid(filepath.Join(base, "homelink"), Options{HomeDir: home})
	// Protected files (which may not exist yet) must not be inside the root.
	ws := filepath.Join(base, "ws")
	expectInvalid(ws, Options{HomeDir: home, ProtectedPaths: []string{filepath.Join(ws, "state", "marker.json")}})
	expectInvalid(ws, Options{HomeDir: home, ProtectedPaths: []string{ws}})

	w, err := Open(ws, Options{HomeDir: home, ProtectedPaths: []string{filepath.Join(base, "state", "x.json")}})
	if err != nil {
		t.Fatalf("valid root refused: %v", err)
	}
	defer w.Close()
	// The home directory may contain the root (the default workspace lives there).
	inHome := filepath.Join(home, "project")
	os.Mkdir(inHome, 0o755)
	if w2, err := Open(inHome, Options{HomeDir: home}); err != nil {
		t.Errorf("root inside home refused: %v", err)
	} else {
		w2.Close()
	}
	if got := strings.Join(w.Operations(), ","); got != "read_file,search_text,list_files" {
		t.Errorf("read-only operations: %s", got)
	}

	// The root is replaced after registration: REGISTRATION_INVALID, and nothing is read from the new one.
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a"), 0o644)
	os.Rename(ws, ws+".moved")
	os.Mkdir(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("impostor"), 0o644)
	_, err = w.Do(context.Background(), OpReadFile, json.RawMessage(`{"path":"a.txt"}`))
	if !errors.Is(err, ErrRegistrationInvalid) {
		t.Errorf("replaced root: %v", err)
	}
	os.RemoveAll(ws)
	_, err = w.Do(context.Background(), OpListFiles, json.RawMessage(`{}`))
	if !errors.Is(err, ErrRegistrationInvalid) {
		t.Errorf("removed root: %v", err)
	}
}

func TestDefaultWorkspace(t *testing.T) {
	home := t.TempDir()
	spec := DefaultSpec{HubURL: "https://hub.example.com/v1/", Secret: "tok", WorkerID: "my:vm", WorkspaceID: "primary", Home: home}
	p, err := DefaultRoot(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(home, ".local/share/codellm/worker/workspaces",
		"id-"+hexHash("https://hub.example.com/v1\x00tok"), "id-"+hexHash("my:vm"), "id-"+hexHash("primary"))
	if p != want {
		t.Fatalf("DefaultRoot = %s, want %s", p, want)
	}
	got, err := EnsureDefault(spec)
	if err != nil || got != p {
		t.Fatalf("EnsureDefault: %v", err)
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("default workspace mode %v", fi.Mode())
	}
	w, err := Open(p, Options{HomeDir: home})
	if err != nil {
		t.Fatalf("default workspace cannot be registered: %v", err)
	}
	w.Close()
	// A symlink planted in its place is refused.
	os.Remove(p)
	os.Symlink(t.TempDir(), p)
	if _, err := EnsureDefault(spec); !errors.Is(err, ErrRegistrationInvalid) {
		t.Fatalf("symlinked default workspace accepted: %v", err)
	}
	if _, err := DefaultRoot(DefaultSpec{Home: home}); err == nil {
		t.Fatal("DefaultRoot without IDs accepted")
	}
}

// runCLI runs the test binary as `codellm workspace ARGS...` in a real process.
func runCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CODELLM_WS_TEST_CLI=1")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestCLI(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a.txt"), []byte("one\ntwo\n"), 0o644)

	out, _, code := runCLI(t, `{"path":"a.txt","maxLines":1}`, "--root", root, "read_file")
	if code != 0 || out != `{"path":"a.txt","content":"one","startLine":1,"endLine":1,"truncated":true,"nextStartLine":2}`+"\n" {
		t.Errorf("read_file: %d %q", code, out)
	}
	out, _, code = runCLI(t, `{"path":"b.txt","content":"x"}`, "--root", root, "write_file")
	var e CLIError
	if code != 1 || json.Unmarshal([]byte(out), &e) != nil || e.ErrorCode != CodeWriteDisabled || e.Error == "" {
		t.Errorf("write without --allow-writes: %d %q", code, out)
	}
	out, _, code = runCLI(t, `{"path":"b.txt","content":"x"}`, "--root", root, "--allow-writes", "write_file")
	if code != 0 || !strings.Contains(out, `"created":true`) {
		t.Errorf("write: %d %q", code, out)
	}
	out, _, code = runCLI(t, `{"path":"../etc/passwd"}`, "--root", root, "read_file")
	if code != 1 || !strings.Contains(out, `"errorCode":"INVALID_PATH"`) {
		t.Errorf("escape: %d %q", code, out)
	}
	out, _, code = runCLI(t, `{}`, "--root", filepath.Join(root, "nope"), "list_files")
	if code != 1 || !strings.Contains(out, `"errorCode":"REGISTRATION_INVALID"`) {
		t.Errorf("bad root: %d %q", code, out)
	}
	out, _, code = runCLI(t, `{"command":"true"}`, "--root", root, "execute_command")
	if code != 1 || !strings.Contains(out, `"errorCode":"COMMAND_DISABLED"`) {
		t.Errorf("commands not enabled: %d %q", code, out)
	}
	out, _, code = runCLI(t, `{"command":"echo hi; exit 4"}`, "--root", root, "--allow-commands", "--sandbox", "off", "execute_command")
	if code != 0 || out != `{"exitCode":4,"stdout":"hi\n","stderr":"","truncated":false,"timedOut":false}`+"\n" {
		t.Errorf("execute_command with an explicitly unconfined sandbox: %d %q", code, out)
	}
	out, _, code = runCLI(t, `{"command":"true"}`, "--root", root, "--allow-commands", "--sandbox", "bogus", "execute_command")
	if code != 1 || !strings.Contains(out, `"errorCode":"INVALID_REQUEST"`) {
		t.Errorf("bad --sandbox: %d %q", code, out)
	}
	_, stderr, code := runCLI(t, `{}`, "read_file")
	if code != 2 || !strings.Contains(stderr, "usage:") {
		t.Errorf("usage: %d %q", code, stderr)
	}
	_, _, code = runCLI(t, `{}`, "--root", root)
	if code != 2 {
		t.Errorf("missing operation: %d", code)
	}
}

// TestCLIProtectsWorkerState (red-team item 7): `codellm workspace --root ~/.config` returned the worker
// identity file, because only the worker passed its protected paths. Registering the same root without
// them (the library with no ProtectedPaths) still reads the identity; the CLI now refuses the root.
func TestCLIProtectsWorkerState(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	idDir := filepath.Join(home, ".config", "codellm", "worker")
	if err := os.MkdirAll(idDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(idDir, "id.json"), []byte(`{"privateKey":"SECRET"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(home, ".config")
	ws, err := Open(cfg, Options{HomeDir: home})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ws.Do(t.Context(), OpReadFile, []byte(`{"path":"codellm/worker/id.json"}`))
	ws.Close()
	if err != nil || !strings.Contains(string(res), "SECRET") {
		t.Fatalf("without the protected paths the identity should be readable: %v %s", err, res)
	}
	for _, root := range []string{cfg, filepath.Join(home, ".local"), filepath.Join(home, ".config", "codellm")} {
		os.MkdirAll(root, 0o700)
		var out, errb strings.Builder
		code := RunCLI([]string{"--root", root, "read_file"}, strings.NewReader(`{"path":"codellm/worker/id.json"}`), &out, &errb)
		if code != 1 || !strings.Contains(out.String(), `"errorCode":"REGISTRATION_INVALID"`) || strings.Contains(out.String(), "SECRET") {
			t.Errorf("--root %s: %d %q", root, code, out.String())
		}
	}
}
