package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/metrics"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/sandbox"
)

// Every reason of codellm_kills_total is counted on both ways in: a chat completion's block and a runner
// API (/api/v2/execute) run, each ended the way its reason says, raise that reason by one and no other.
// (TestEveryKillReasonReachable in internal/pipeline checks the blocks' typed statuses; this checks the
// metric the execution core counts.)
func TestEveryKillReasonCounted(t *testing.T) {
	if testMode(t) != sandbox.ModeNative {
		t.Skip("the limits need the native sandbox") // whose cgroups are required: memory and pids limits apply
	}
	const outCap = 1000
	ts := startServer(t, options{limits: sandbox.Limits{Memory: 128 << 20, Pids: 32, CPUTime: time.Second},
		ecfg: func(c *engine.Config) { c.Pipeline.MaxOutputBytes = outCap }})
	runnerRoot, err := os.MkdirTemp("", "codellm-kills-") // the sandbox user must traverse its parents
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(runnerRoot)
	os.Chmod(runnerRoot, 0o711)
	ecfg := ts.srv.Engine().Config()
	rn, err := runner.New(runner.Config{Programs: ecfg.Programs, Sandbox: ts.sb, Slots: ecfg.Slots, WorkRoot: runnerRoot,
		MaxRunTimeout: 30 * time.Second, MaxOutputBytes: outCap, Kills: ts.srv.Metrics()})
	if err != nil {
		t.Fatal(err)
	}
	defer rn.Close()
	rn.Register(ts.srv.Route)

	fork := "import os, sys, time\nfor _ in range(64):\n    try:\n        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n" +
		"    except OSError:\n        sys.exit(3)\n"
	for _, c := range []struct {
		reason, lang, code string
		meta               map[string]string // chat: metadata
		piston             map[string]any    // runner: limits
		cancel             bool
	}{
		{reason: "timeout", lang: "bash", code: "sleep 30", meta: map[string]string{"timeout_seconds": "1"},
			piston: map[string]any{"run_timeout": 1000}},
		{reason: "cancelled", lang: "bash", code: "sleep 30", cancel: true},
		{reason: "output_limit", lang: "bash", code: "yes"},
		{reason: "memory", lang: "python", code: "b = b'x' * (512 << 20)\n", piston: map[string]any{"run_memory_limit": 64 << 20}},
		{reason: "pids", lang: "python", code: fork},
		{reason: "cpu", lang: "python", code: "while True:\n    pass\n", piston: map[string]any{"run_cpu_time": 1000}},
	} {
		t.Run(c.reason+"/chat", func(t *testing.T) {
			body := chat(block(c.lang, c.code))
			if c.meta != nil {
				body["metadata"] = c.meta
			}
			ts.wantKill(t, c.reason, "/v1/chat/completions", body, c.cancel)
		})
		t.Run(c.reason+"/runner", func(t *testing.T) {
			lang := map[string]string{"bash": "bash", "python": "python"}[c.lang]
			body := map[string]any{"language": lang, "version": "*", "files": []map[string]string{{"content": c.code}}}
			for k, v := range c.piston {
				body[k] = v
			}
			ts.wantKill(t, c.reason, runner.PathExecute, body, c.cancel)
		})
	}
}

// wantKill posts body to path (giving up after half a second when cancel) and checks that exactly reason
// has been counted once more.
func (ts *testServer) wantKill(t *testing.T, reason, path string, body any, cancel bool) {
	t.Helper()
	before := ts.kills(t)
	raw, _ := json.Marshal(body)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if cancel {
		time.AfterFunc(500*time.Millisecond, stop)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	switch {
	case cancel && err == nil:
		resp.Body.Close()
		t.Fatalf("the request was answered %d before the client gave up", resp.StatusCode)
	case !cancel && err != nil:
		t.Fatal(err)
	case !cancel:
		resp.Body.Close()
	}
	// An answered run was counted before its reply; a cancelled one is once the server has noticed.
	deadline := time.Now()
	if cancel {
		deadline = deadline.Add(30 * time.Second)
	}
	for {
		after := ts.kills(t)
		diff := map[string]int{}
		for _, r := range metrics.KillReasons {
			if d := after[r] - before[r]; d != 0 {
				diff[r] = d
			}
		}
		if len(diff) == 1 && diff[reason] == 1 {
			return
		}
		if len(diff) > 1 || diff[reason] > 1 || time.Now().After(deadline) {
			t.Fatalf("codellm_kills_total changed by %v, want %s +1", diff, reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var killLine = regexp.MustCompile(`(?m)^codellm_kills_total\{reason="([a-z_]+)"\} ([0-9]+)$`)

// kills reads codellm_kills_total from /metrics, by reason.
func (ts *testServer) kills(t *testing.T) map[string]int {
	t.Helper()
	status, _, body := ts.get(t, "/metrics")
	if status != 200 {
		t.Fatalf("/metrics %d %s", status, body)
	}
	out := map[string]int{}
	for _, m := range killLine.FindAllSubmatch(body, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		out[string(m[1])] = n
	}
	if len(out) != len(metrics.KillReasons) {
		t.Fatalf("codellm_kills_total has %v, want every reason of %v", out, metrics.KillReasons)
	}
	return out
}
