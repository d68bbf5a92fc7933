package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/wire"
)

// testEnv is a workspace root plus a sibling directory "outside" that no tool may reach.
type testEnv struct {
	t       testing.TB
	base    string
	root    string
	outside string
	ws      *Workspace
}

func newEnv(t *testing.T, opts Options) *testEnv { return newEnvTB(t, opts) }

func newEnvTB(t testing.TB, opts Options) *testEnv {
	t.Helper()
	base := t.TempDir()
	e := &testEnv{t: t, base: base, root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{e.root, e.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(e.outside, "secret.txt"), []byte("TOP SECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if opts.HomeDir == "" {
		opts.HomeDir = filepath.Join(base, "home")
	}
	ws, err := Open(e.root, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	e.ws = ws
	return e
}

// forEachResolver runs f with the openat2 resolver and with the portable os.Root resolver.
func forEachResolver(t *testing.T, f func(t *testing.T)) {
	for _, portable := range []bool{false, true} {
		name := "openat2"
		if portable {
			name = "osroot"
		}
		t.Run(name, func(t *testing.T) {
			old := forcePortableResolver
			forcePortableResolver = portable
			defer func() { forcePortableResolver = old }()
			f(t)
		})
	}
}

func (e *testEnv) write(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) read(rel string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.root, filepath.FromSlash(rel)))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func (e *testEnv) symlink(target, rel string) {
	e.t.Helper()
	if err := os.Symlink(target, filepath.Join(e.root, filepath.FromSlash(rel))); err != nil {
		e.t.Fatal(err)
	}
}

// do runs op with a JSON request and decodes the result into a generic map.
func (e *testEnv) do(op, req string) (map[string]any, error) {
	e.t.Helper()
	out, err := e.ws.Do(context.Background(), op, json.RawMessage(req))
	if err != nil {
		var we *Error
		if !errors.As(err, &we) {
			e.t.Fatalf("%s: error is not *Error: %T %v", op, err, err)
		}
		if strings.Contains(we.Message, e.base) {
			e.t.Fatalf("%s: error leaks a host path: %q", op, we.Message)
		}
		return nil, err
	}
	// Command output is the command's own business (a command may print its working directory).
	if op != OpExecuteCommand && strings.Contains(string(out), e.base) {
		e.t.Fatalf("%s: result leaks a host path: %s", op, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		e.t.Fatalf("%s: result is not JSON: %v", op, err)
	}
	crossValidate(e.t, op, req, out)
	return m, nil
}

// crossValidate runs the request and the enveloped result through the bridge's shared §9 validators (the ones
// the hub applies): a request this package served must be one the hub could send, and its result one the hub
// accepts.
func crossValidate(t testing.TB, op, req string, out []byte) {
	t.Helper()
	ro, err := bridge.ParseObject([]byte(req))
	if err != nil {
		t.Fatalf("%s: request does not parse for the bridge: %v", op, err)
	}
	for k, v := range map[string]any{"protocolVersion": float64(1), "operation": op, "workspaceId": "primary"} {
		if _, ok := ro.Get(k); !ok {
			ro.Set(k, v)
		}
	}
	wreq, err := bridge.ValidateWorkspaceRequest(ro)
	if err != nil {
		t.Fatalf("%s %s: served, but the bridge validator rejects the request: %v", op, wire.ClipUTF16(req, 200), err)
	}
	res, err := bridge.ParseObject(out)
	if err != nil {
		t.Fatalf("%s: result does not parse for the bridge: %v", op, err)
	}
	env := &bridge.Object{}
	env.Set("protocolVersion", float64(1))
	env.Set("operation", op)
	env.Set("workspaceId", "primary")
	for _, m := range res.Members {
		env.Set(m.Key, m.Value)
	}
	if !bridge.ValidateWorkspaceResult(wreq, env, true) {
		t.Fatalf("%s %s: the bridge validator rejects the result %s", op, wire.ClipUTF16(req, 200), wire.ClipUTF16(string(out), 400))
	}
}

// ok runs op and fails the test on error.
func (e *testEnv) ok(op, req string) map[string]any {
	e.t.Helper()
	m, err := e.do(op, req)
	if err != nil {
		e.t.Fatalf("%s %s: unexpected error %v", op, wire.ClipUTF16(req, 200), err)
	}
	return m
}

// fail runs op and requires the given error code.
func (e *testEnv) fail(op, req string, code Code) *Error {
	e.t.Helper()
	m, err := e.do(op, req)
	if err == nil {
		e.t.Fatalf("%s %s: expected %s, got result %v", op, wire.ClipUTF16(req, 200), code, m)
	}
	var we *Error
	errors.As(err, &we)
	if we.Code != code {
		e.t.Fatalf("%s %s: expected %s, got %v", op, wire.ClipUTF16(req, 200), code, err)
	}
	if !errors.Is(err, &Error{Code: code}) {
		e.t.Fatalf("errors.Is does not match the code")
	}
	return we
}

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// noTempFiles asserts that no staging file was left anywhere under the root.
func (e *testEnv) noTempFiles() {
	e.t.Helper()
	filepath.WalkDir(e.root, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".codellm-") {
			e.t.Errorf("staging file left behind: %s", p)
		}
		return nil
	})
}
