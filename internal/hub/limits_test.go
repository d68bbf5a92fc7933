package hub

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
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

// TestRateLimits: upstream's per-caller limits are on by default. The 21st /v1/exec of a caller within
// 30 s is 429 in upstream's exec body ({error: rate_limited, message, retry_after_seconds}) with
// Retry-After and the RateLimit-* headers, and reaches no worker; another caller (another user of the
// tenant) keeps its own budget; file listings have theirs, refused as upstream's file limiters do
// ({error: "<sentence>"}). With the limits off nothing is refused.
func TestRateLimits(t *testing.T) {
	keys := func(c *Config) {
		c.ClientKeys = append(c.ClientKeys, ClientKey{Key: "second-user-key", TenantID: "default", UserID: "u2"})
	}
	h := newTestHub(t, keys)
	w := newWorker(t, h, "vm-rate")
	w.pair(h)
	w.mustRegister()
	var calls atomic.Int32
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { calls.Add(1); return runnerReply(a, w.incarnation) })
	defer stop()
	exec := `{"lang":"py","code":"print(1)"}`
	for i := 1; i <= 20; i++ {
		r := h.client(t, "/v1/exec", exec, nil)
		if r.status != 200 || r.header.Get("RateLimit-Limit") != "20" || r.header.Get("RateLimit-Remaining") != strconv.Itoa(20-i) ||
			r.header.Get("RateLimit-Policy") != "20;w=30" {
			t.Fatalf("exec %d: %d %v %s", i, r.status, r.header, r.body)
		}
	}
	n := calls.Load()
	r := h.client(t, "/v1/exec", exec, nil)
	var body map[string]any
	if err := json.Unmarshal(r.body, &body); err != nil || r.status != 429 || len(body) != 3 || body["error"] != "rate_limited" ||
		body["retry_after_seconds"] != float64(mustAtoi(t, r.header.Get("Retry-After"))) ||
		!regexp.MustCompile(`^Too many CodeAPI execution requests\. Please retry in [0-9]+ seconds?\.$`).MatchString(fmt.Sprint(body["message"])) ||
		r.header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("21st exec: %d %v %s", r.status, r.header, r.body)
	}
	if calls.Load() != n {
		t.Fatal("a rate-limited exec reached the worker")
	}
	// Another user of the same tenant has a budget of its own.
	if r := h.client(t, "/v1/exec", exec, map[string]string{"X-API-Key": "second-user-key"}); r.status != 200 {
		t.Fatalf("another caller: %d %s", r.status, r.body)
	}
	// File listings count apart from execs, with upstream's sentence.
	sid := mustUpload(t, h, "a.txt", "x").SessionID
	for i := 0; i < 120; i++ {
		if r := h.get(t, apiKey, "/files/"+sid); r.status != 200 {
			t.Fatalf("listing %d: %d %s", i, r.status, r.body)
		}
	}
	if r := h.get(t, apiKey, "/files/"+sid); r.status != 429 || r.header.Get("Retry-After") == "" ||
		!regexp.MustCompile(`^\{"error":"Too many file list requests\. Please retry in [0-9]+ seconds?\."\}$`).Match(r.body) {
		t.Fatalf("121st listing: %d %s", r.status, r.body)
	}

	off := newTestHub(t, func(c *Config) { c.RateLimits.Off = true })
	ow := newWorker(t, off, "vm-unlimited")
	ow.pair(off)
	ow.mustRegister()
	stopOff := ow.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, ow.incarnation) })
	defer stopOff()
	for i := 0; i < 25; i++ {
		if r := off.client(t, "/v1/exec", exec, nil); r.status != 200 || r.header.Get("RateLimit-Limit") != "" {
			t.Fatalf("limits off, exec %d: %d %s", i, r.status, r.body)
		}
	}
}

// TestRateLimitSharedByReplicas: two hub replicas over one store count one caller's requests together,
// so running more replicas does not multiply a caller's budget.
func TestRateLimitSharedByReplicas(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.RateLimits.Listing = RateLimit{Max: 3, Window: time.Minute} })
	other := h.replicaOf(t)
	sid := mustUpload(t, h, "a.txt", "x").SessionID
	for i, hub := range []*testHub{h, other, h} {
		if r := hub.get(t, apiKey, "/files/"+sid); r.status != 200 {
			t.Fatalf("listing %d: %d %s", i, r.status, r.body)
		}
	}
	if r := other.get(t, apiKey, "/files/"+sid); r.status != 429 {
		t.Fatalf("4th listing on the other replica: %d %s", r.status, r.body)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// replicaOf starts a second hub replica over h's store and file store, with h's configuration.
func (h *testHub) replicaOf(t *testing.T) *testHub {
	t.Helper()
	r, err := New(h.cfg, h.store)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(func() {
		r.Close()
		srv.Close()
	})
	return &testHub{Hub: r, srv: srv, base: srv.URL + "/v1", store: h.store}
}

// TestRateLimitFailsClosed: a limit the store cannot count refuses (503 store_unavailable with
// Retry-After, counted as a rate_limit store error) instead of letting the request through unchecked.
func TestRateLimitFailsClosed(t *testing.T) {
	h, fb, _ := newFaultHub(t)
	w := newWorker(t, h, "rate-outage-vm")
	w.pair(h)
	w.mustRegister()
	fb.SetDown(true)
	r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, nil)
	if r.status != 503 || errField(r) != "store_unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("exec during outage: %d %s", r.status, r.body)
	}
	fb.SetDown(false)
	if m := get(t, h.srv.URL+"/metrics"); !strings.Contains(string(m.body), `codellm_hub_store_errors_total{operation="rate_limit"} 1`) {
		t.Fatalf("no rate_limit store error counted:\n%s", m.body)
	}
}

// TestQueueWhileNoWorker: a request that finds no worker online waits in the queue, as the Code API's
// job queue holds it, and runs once a worker registers: one the hub never saw (its pools are empty, as
// after the hub's restart) and one whose registration lapsed (while it re-registers). The wait is
// bounded: by QueueMax (429 at once) and by the queue timeout (then 503 worker_unavailable, nothing ran).
func TestQueueWhileNoWorker(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.QueueTimeout = 20 * time.Second; c.QueueMax = 1 }, boltstore.WithLeaseTTL(time.Second))
	waitQueued := func(sig string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if n, err := h.replica.b.ZCount(t.Context(), queueKey("default", sig), -1); err == nil && n == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no request waits in queue %s", sig)
			}
		}
	}
	timeout := map[string]string{"X-Codellm-Timeout-Ms": "30000"}

	// No worker ever registered.
	resp := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"first"}`, timeout)
	waitQueued("no-worker")
	// The queue's bound: QueueMax requests wait, the next one is told at once.
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, nil); r.status != 429 || errField(r) != "rate_limited" {
		t.Fatalf("a request past QueueMax: %d %s", r.status, r.body)
	}
	w := newWorker(t, h, "late-vm")
	w.pair(h)
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, w.incarnation) })
	if r := recv(t, resp); r.status != 200 || !strings.Contains(string(r.body), "ran:first") {
		t.Fatalf("the waiting request: %d %s", r.status, r.body)
	}

	// Its registration lapses (the worker restarts), and it comes back.
	stop()
	waitOffline(t, h, w.id)
	p, err := h.makePlan(t.Context(), &dispatchReq{caller: &h.cfg.ClientKeys[0], kind: bridge.KindSandbox})
	if err != nil {
		t.Fatal(err)
	}
	resp = asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"second"}`, timeout)
	waitQueued(p.sig())
	stop = w.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, w.incarnation) })
	if r := recv(t, resp); r.status != 200 || !strings.Contains(string(r.body), "ran:second") {
		t.Fatalf("the request waiting for the re-registration: %d %s", r.status, r.body)
	}
	stop()
}
