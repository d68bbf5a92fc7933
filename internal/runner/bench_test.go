package runner

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
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
			req.Header.Set(SessionHeader, session)
		}
		rec := httptest.NewRecorder()
		tr.h.ServeHTTP(rec, req)
		if rec.Code != 200 || !bytes.Contains(rec.Body.Bytes(), []byte(`"stdout":"hello\n"`)) {
			b.Fatalf("%d %s", rec.Code, rec.Body.String())
		}
	}
}
