package server_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/interp"
)

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func readDir(p string) ([]os.DirEntry, error) { return os.ReadDir(p) }

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond with a generous deadline: it detects hangs, it does not measure speed.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not reached within 30s")
}

func startServerWithRegistry(t *testing.T, path string) *testServer {
	t.Helper()
	reg, err := interp.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	programs, err := interp.Enable(reg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, options{skipWait: true, ecfg: func(c *engine.Config) { c.Programs = programs }})
}

// runs is the number of runs the server executed (the count of codellm_run_duration_seconds over all
// outcomes): the host-side witness that a request did or did not run code, since nothing a sandboxed
// block writes is visible on the host.
func (ts *testServer) runs(t *testing.T) int {
	t.Helper()
	_, _, body := ts.get(t, "/metrics")
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "codellm_run_duration_seconds_count") {
			f := strings.Fields(line)
			v, _ := strconv.Atoi(f[len(f)-1])
			n += v
		}
	}
	return n
}

// inFlight is the codellm_runs_in_flight gauge: runs holding a slot now.
func (ts *testServer) inFlight(t *testing.T) int {
	t.Helper()
	_, _, body := ts.get(t, "/metrics")
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "codellm_runs_in_flight "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no codellm_runs_in_flight in /metrics")
	return 0
}
