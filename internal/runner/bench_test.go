package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/codellm/codellm/internal/wire"
)

// BenchmarkExecuteEcho measures one session-less bash echo through the HTTP handler: decode, validate,
// workspace setup, sandbox start, capture, files-out scan, cleanup and encoding.
func BenchmarkExecuteEcho(b *testing.B) {
	benchExecute(b, "")
}

// BenchmarkExecuteEchoSession is the same within one persistent session (no workspace creation).
func BenchmarkExecuteEchoSession(b *testing.B) {
	benchExecute(b, "bench")
}

// BenchmarkExecuteEchoOff is the one-off echo in sandbox mode off: the runner's own overhead plus a
// plain fork/exec of bash, for comparison with the sandboxed figures.
func BenchmarkExecuteEchoOff(b *testing.B) {
	benchExecuteWith(b, "", func(c *Config) { c.Sandbox = offSandbox(b) })
}

func benchExecute(b *testing.B, session string) {
	sb, err := testSandbox()
	b.Logf("sandbox mode %s (native unavailable: %v)", sb.Mode(), err)
	benchExecuteWith(b, session, nil)
}

func benchExecuteWith(b *testing.B, session string, mod func(*Config)) {
	tr := newRunner(b, mod)
	body, _ := json.Marshal(code("bash", "echo hello"))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, PathExecute, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if session != "" {
			req.Header.Set(wire.RuntimeSessionHeader, session)
		}
		rec := httptest.NewRecorder()
		tr.h.ServeHTTP(rec, req)
		if rec.Code != 200 || !bytes.Contains(rec.Body.Bytes(), []byte(`"stdout":"hello\n"`)) {
			b.Fatalf("%d %s", rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkSessionCopy measures one session execute (bash echo) over a session holding nothing or 64 MiB
// in 64 files, bind-mounted (WorkspaceSize 0) and in the bounded private mode, which copies the whole
// session into the sandbox's tmpfs, compares it for files out and copies it back on every execute.
func BenchmarkSessionCopy(b *testing.B) {
	for _, mib := range []int{0, 64} {
		for _, private := range []bool{false, true} {
			name := fmt.Sprintf("%dMiB/bind", mib)
			if private {
				name = fmt.Sprintf("%dMiB/private", mib)
			}
			b.Run(name, func(b *testing.B) { benchSessionCopy(b, mib, private) })
		}
	}
}

func benchSessionCopy(b *testing.B, mib int, private bool) {
	tr := newRunner(b, func(cfg *Config) {
		if private {
			cfg.WorkspaceSize, cfg.privateWorkspace = 256<<20, true
		}
	})
	tr.exec("copy", code("bash", fmt.Sprintf("for i in $(seq %d); do head -c 1048576 /dev/urandom > f$i; done", mib)))
	echo := code("bash", "echo hello")
	b.ResetTimer()
	for b.Loop() {
		if out := tr.exec("copy", echo).Run.Stdout; out != "hello\n" {
			b.Fatalf("%q", out)
		}
	}
}
