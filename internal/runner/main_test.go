package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/slots"
)

func TestMain(m *testing.M) {
	sandbox.Main() // the sandbox helper hook: must run before anything else in a test binary
	// The sandbox keeps a few spawner goroutines locked to their threads for the life of the process
	// (parent-death signals follow the parent thread); they are not leaks of this package.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"),
		goleak.Cleanup(func(code int) { closeTestSandbox(); os.Exit(code) })) // a Cleanup must exit itself
}

// closeTestSandbox closes the shared test Sandbox when one was made: its pooled run cgroups would
// otherwise outlive the test binary (the next codellm start sweeps them, but a CI host has none).
func closeTestSandbox() {
	if made.Load() {
		if sb, _ := testSandbox(); sb != nil {
			_ = sb.Close()
		}
	}
}

// made records that testSandbox ran, so that closing it does not make one.
var made atomic.Bool

func requireSandbox() bool { return os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" }

// testSandbox picks the sandbox the functional tests run in: native when this host can run it (checked
// by executing a real program through a runner), otherwise off. nativeErr says why native is not used.
var testSandbox = sync.OnceValues(func() (*sandbox.Sandbox, error) {
	made.Store(true)
	nat, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeNative})
	if err == nil {
		if rep := nat.Report(); !rep.Ready {
			err = &sandbox.UnavailableError{Mechanism: strings.Join(rep.Missing, ","), Reason: "missing on this host"}
		}
	}
	if err == nil {
		err = trial(nat)
	}
	if err == nil {
		return nat, nil
	}
	if nat != nil {
		_ = nat.Close()
	}
	off, oerr := sandbox.New(sandbox.Config{Mode: sandbox.ModeOff})
	if oerr != nil {
		panic(oerr)
	}
	return off, err
})

func trial(sb *sandbox.Sandbox) error {
	progs, err := interp.Enable(interp.Builtin(), nil, nil)
	if err != nil {
		return err
	}
	r, err := New(Config{Programs: progs, Sandbox: sb, Slots: slots.New(1, time.Second)})
	if err != nil {
		return err
	}
	defer r.Close()
	resp, err := r.Execute(context.Background(), "", ExecuteRequest{Language: "bash", Version: "*",
		Files: []File{{Content: ptr("echo ok")}}})
	if err != nil {
		return err
	}
	if resp.Run.Stdout != "ok\n" {
		return &sandbox.UnavailableError{Mechanism: "trial", Reason: "unexpected output " + resp.Run.Stdout + resp.Run.Stderr}
	}
	return nil
}

// native returns the native sandbox or skips (fails under CODELLM_REQUIRE_SANDBOX=1).
func native(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	sb, err := testSandbox()
	if err != nil {
		if requireSandbox() {
			t.Fatalf("CODELLM_REQUIRE_SANDBOX=1 but the native sandbox cannot run here: %v", err)
		}
		t.Skipf("native sandbox unavailable on this host (%v); this test needs it", err)
	}
	return sb
}

func offSandbox(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func ptr[T any](v T) *T { return &v }

type testRunner struct {
	*Runner
	t    testing.TB
	pool *slots.Pool
	h    http.Handler
}

// newRunner builds a runner on the test sandbox; mod adjusts the config. Cleanup closes it and checks
// that its directory is gone.
func newRunner(t testing.TB, mod func(*Config)) *testRunner {
	t.Helper()
	sb, err := testSandbox()
	if err != nil {
		t.Logf("running in sandbox mode off: %v", err)
	}
	progs, err := interp.Enable(interp.Builtin(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := slots.New(2, 5*time.Second)
	cfg := Config{Programs: progs, Sandbox: sb, Slots: pool, MaxRunTimeout: 20 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := r.dir
	t.Cleanup(func() {
		r.Close()
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("runner directory %s still exists after Close (%v)", dir, err)
		}
		// Workspaces are removed after their reply (removeLater); Close waits for that.
		if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(mi, []byte(" "+dir+"/")) {
			t.Errorf("mounts under %s left after Close", dir)
		}
	})
	return &testRunner{Runner: r, t: t, pool: pool, h: r.Handler()}
}

// do sends a request through the HTTP handler and returns the status and decoded body.
func (tr *testRunner) do(method, path string, body any, hdr map[string]string) (int, map[string]any, http.Header) {
	tr.t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			tr.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, path, rd)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	tr.h.ServeHTTP(rec, req)
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			var arr []any
			if json.Unmarshal(rec.Body.Bytes(), &arr) == nil {
				return rec.Code, map[string]any{"array": arr}, rec.Header()
			}
			tr.t.Fatalf("%s %s: body is not JSON: %v: %q", method, path, err, rec.Body.String())
		}
	}
	return rec.Code, out, rec.Header()
}

// exec runs a request in-process and fails the test on error.
func (tr *testRunner) exec(session string, req ExecuteRequest) *ExecuteResponse {
	tr.t.Helper()
	resp, err := tr.Execute(context.Background(), session, req)
	if err != nil {
		tr.t.Fatalf("Execute: %v", err)
	}
	return resp
}

func code(lang, src string) ExecuteRequest {
	return ExecuteRequest{Language: lang, Version: "*", Files: []File{{Content: ptr(src)}}}
}

func newPool(n int, wait time.Duration) *slots.Pool { return slots.New(n, wait) }
