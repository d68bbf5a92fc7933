package hub

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/filestore"
)

// TestUpstreamDefaults: without settings the hub has the Code API's defaults: a 300 s job (JOB_TIMEOUT)
// and 25 MiB files (MAX_FILE_SIZE), and an input of that size fits one /v1/exec.
func TestUpstreamDefaults(t *testing.T) {
	h := newTestHub(t, nil)
	if h.cfg.ExecTimeout != 300*time.Second || h.cfg.FileLimits.MaxFileBytes != 25<<20 || h.cfg.MaxExecInputBytes < 25<<20 ||
		filestore.DefaultMaxFileBytes != 25<<20 {
		t.Fatalf("exec timeout %v, file %d, exec inputs %d", h.cfg.ExecTimeout, h.cfg.FileLimits.MaxFileBytes, h.cfg.MaxExecInputBytes)
	}
	big := strings.Repeat("x", 20<<20) // over the old 10 MiB default, under upstream's 25 MiB
	if r := h.upload(t, apiKey, false, uploadPart{"file", "big.csv", big}); r.status != 200 {
		t.Fatalf("a 20 MiB upload: %d %.200s", r.status, r.body)
	}
}

// TestExecBodyTimeout: /v1/exec's body timeout (ms) becomes the run's limit, rounded up and never above
// the request's own budget; a timeout that is not a positive number is upstream's 400 and reaches no
// worker. Without one the run gets the 300 s job's budget.
func TestExecBodyTimeout(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "vm-timeout")
	w.pair(h)
	w.mustRegister()
	var calls atomic.Int32
	var got atomic.Int64
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		calls.Add(1)
		body, _ := a.Request.Object().Get("body")
		rt, _ := body.(*bridge.Object).Get("run_timeout")
		ms, _ := rt.(float64)
		got.Store(int64(ms))
		return runnerReply(a, w.incarnation)
	})
	defer stop()
	for _, c := range []struct {
		timeout  string // the body member's JSON ("" : absent)
		min, max int64  // run_timeout in ms
	}{
		{`2000`, 2000, 2000},
		{`1500.2`, 1501, 1501},
		{`null`, 290_000, 295_000},
		{``, 290_000, 295_000},
		{`99999999999`, 290_000, 295_000}, // clamped to the request's budget
	} {
		body := `{"lang":"py","code":"print(1)"`
		if c.timeout != "" {
			body += `,"timeout":` + c.timeout
		}
		if r := h.client(t, "/v1/exec", body+`}`, nil); r.status != 200 {
			t.Fatalf("timeout %s: %d %s", c.timeout, r.status, r.body)
		}
		if ms := got.Load(); ms < c.min || ms > c.max {
			t.Errorf("timeout %s: run_timeout %d ms, want %d..%d", c.timeout, ms, c.min, c.max)
		}
	}
	n := calls.Load()
	for _, bad := range []string{`0`, `-5`, `"2000"`, `true`, `{}`} {
		r := h.client(t, "/v1/exec", `{"lang":"py","code":"print(1)","timeout":`+bad+`}`, nil)
		if r.status != 400 || errField(r) != "invalid_request" || !strings.Contains(string(r.body), `"message":"timeout must be a positive number of milliseconds"`) {
			t.Errorf("timeout %s: %d %s", bad, r.status, r.body)
		}
	}
	if calls.Load() != n {
		t.Fatal("a refused timeout reached the worker")
	}
}
