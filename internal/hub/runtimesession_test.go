package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// TestRuntimeSessionID: the Code API's own vectors (service/src/runtime-session/id.test.ts) hold, so a
// hub and a Code API name the same runtime session alike.
func TestRuntimeSessionID(t *testing.T) {
	if got := runtimeSessionID("tenant-a", "user-1", "conv-1"); got != "rt_27ecde4cf502ef6bc0610e7bd8e025bf889ffec1" {
		t.Fatalf("runtimeSessionID = %s", got)
	}
	base := runtimeSessionID("tenant-a", "user-1", "conv-1")
	for _, other := range [][3]string{{"tenant-b", "user-1", "conv-1"}, {"tenant-a", "user-2", "conv-1"}, {"tenant-a", "user-1", "conv-2"},
		{"ten", "ant-user", "conv-1"}} {
		if runtimeSessionID(other[0], other[1], other[2]) == base {
			t.Errorf("%q names the same session", other)
		}
	}
	if runtimeSessionID("a", "b\x00c", "d") == runtimeSessionID("a\x00b", "c", "d") {
		t.Error("a NUL in an identity field forged a field boundary")
	}
}

// TestRuntimeSessionHint: /v1/exec with runtime_session_hint on the stateful profile, as LibreChat's
// stateful code sessions send it (X-CodeAPI-Expected-Profile: stateful), runs every exec of one hint in one
// session on the worker that holds its state, echoes runtime_session_id and runtime_status, and refuses a
// bad hint or profile in the Code API's shapes. Golden pairs: testdata/runtime_session_golden.json.
func TestRuntimeSessionHint(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.ClientKeys = append(c.ClientKeys, ClientKey{Key: "k-acme", TenantID: "acme"}) })
	w := newWorker(t, h, "state-vm")
	w.caps.StatefulWorkspace = true
	w.pair(h)
	w.mustRegister()
	var mu sync.Mutex
	var runs []string // each run's runtimeSessionId
	serve := func() func() {
		inc := w.incarnation
		return w.serve(func(a *bridge.Assignment) bridge.Settlement {
			mu.Lock()
			runs = append(runs, a.RuntimeSessionID)
			mu.Unlock()
			return runnerReply(a, inc)
		})
	}
	stop := serve()
	defer func() { stop() }()

	g := &goldenClient{h: h, t: t, norm: normalizer{}, answer: []string{executionProfileHeader}}
	stateful := map[string]string{"X-API-Key": apiKey, expectedProfileHeader: profileStateful}
	hinted := func(hint string) string {
		return `{"lang":"py","code":"print(1)","runtime_session_hint":"` + hint + `"}`
	}
	first := g.do("first exec of a hint: new", "POST", "/exec", stateful, hinted("v2:user:conv-1"))
	second := g.do("second exec of the hint: reused, same session", "POST", "/exec", stateful, hinted("v2:user:conv-1"))
	var a, b struct {
		SessionID        string `json:"session_id"`
		RuntimeSessionID string `json:"runtime_session_id"`
		RuntimeStatus    string `json:"runtime_status"`
	}
	_ = json.Unmarshal(first.body, &a)
	_ = json.Unmarshal(second.body, &b)
	if first.status != 200 || a.RuntimeStatus != "new" || b.RuntimeStatus != "reused" || a.SessionID != b.SessionID ||
		a.RuntimeSessionID != runtimeSessionID("default", "", "v2:user:conv-1") || b.RuntimeSessionID != a.RuntimeSessionID {
		t.Fatalf("hinted execs: %s / %s", first.body, second.body)
	}
	g.do("the previous answer's session_id beside the hint", "POST", "/exec", stateful,
		`{"lang":"py","code":"print(1)","session_id":"`+a.SessionID+`","runtime_session_hint":"v2:user:conv-1"}`)
	g.do("another hint: another session", "POST", "/exec", stateful, hinted("v2:user:conv-2"))
	g.do("no profile header, a hint: stateful", "POST", "/exec", map[string]string{"X-API-Key": apiKey}, hinted("v2:user:conv-1"))
	g.do("the default profile ignores the hint", "POST", "/exec", map[string]string{"X-API-Key": apiKey, expectedProfileHeader: profileDefault}, hinted("v2:user:conv-1"))
	g.do("stateful without a hint (affinity): a one-shot run", "POST", "/exec", stateful, `{"lang":"py","code":"print(1)"}`)
	g.do("another tenant, the same hint: its own session", "POST", "/exec", map[string]string{"X-API-Key": "k-acme", expectedProfileHeader: profileStateful}, hinted("v2:user:conv-1"))
	mu.Lock()
	want := []string{a.SessionID, a.SessionID, a.SessionID}
	if len(runs) != 8 || !equalStrings(runs[:3], want) || runs[3] == a.SessionID || runs[4] != a.SessionID ||
		runs[5] == a.SessionID || runs[6] == a.SessionID || runs[7] == a.SessionID || runs[7] == runs[3] {
		t.Errorf("runs in sessions %q", runs)
	}
	mu.Unlock()

	// The worker restarts: the session's files went with its process, so the hint starts it afresh.
	stop()
	w.incarnation = bridge.NewID()
	w.mustRegister()
	stop = serve()
	g.do("after the session's worker restarted: new again", "POST", "/exec", stateful, hinted("v2:user:conv-1"))
	g.do("and reused after that", "POST", "/exec", stateful, hinted("v2:user:conv-1"))

	for _, c := range []struct{ name, body string }{
		{"hint not a string", `{"lang":"py","code":"x","runtime_session_hint":42}`},
		{"hint with a space", `{"lang":"py","code":"x","runtime_session_hint":"has space"}`},
		{"hint over 128 characters", `{"lang":"py","code":"x","runtime_session_hint":"` + strings.Repeat("x", 129) + `"}`},
	} {
		g.do(c.name, "POST", "/exec", stateful, c.body)
	}
	g.do("unknown profile", "POST", "/exec", map[string]string{"X-API-Key": apiKey, expectedProfileHeader: "aws"}, hinted("h"))
	req, _ := http.NewRequest(http.MethodPost, h.base+"/exec", strings.NewReader(hinted("h")))
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Add(expectedProfileHeader, profileStateful)
	req.Header.Add(expectedProfileHeader, profileDefault)
	if r := doHTTP(t, req); r.status != 400 || !strings.Contains(string(r.body), `"expected_profile":"stateful,default"`) {
		t.Errorf("two profile headers: %d %s", r.status, r.body)
	}

	strict := newTestHub(t, func(c *Config) { c.RuntimeSessionMode = RuntimeSessionsStrict })
	off := newTestHub(t, func(c *Config) { c.RuntimeSessionMode = RuntimeSessionsStateless })
	g.h = strict
	g.do("strict: stateful without a hint", "POST", "/exec", stateful, `{"lang":"py","code":"x"}`)
	g.h = off
	g.do("stateless hub: stateful expected", "POST", "/exec", stateful, hinted("h"))
	compareGoldenCalls(t, "testdata/runtime_session_golden.json", g.calls)
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 10 || runs[8] != a.SessionID || runs[9] != a.SessionID {
		t.Errorf("runs after the restart %q", runs[8:])
	}
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// TestRuntimeSessionRunsAreSerial: a second exec of a runtime session while its first still runs (LibreChat
// sends a conversation's parallel tool calls with one hint) waits for the first and then runs in the
// session, instead of the 409 session_quarantined it got on the old code; meanwhile another session of the
// same worker takes its free slot rather than waiting behind it in the worker's queue. A run that expired unsettled still quarantines.
func TestRuntimeSessionRunsAreSerial(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "state-vm")
	w.caps.StatefulWorkspace = true
	w.caps.WorkspaceLeaseSlots = 2
	w.pair(h)
	w.mustRegister()
	leaseSlot := func(slot int) *bridge.Assignment {
		t.Helper()
		wait, s := 2000.0, float64(slot)
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
			r := w.send(context.Background(), bridge.PathLease(w.id), bridge.LeaseRequest{ProtocolVersion: 1, WaitMs: &wait,
				IncarnationID: w.incarnation, WorkspaceLeaseSlot: &s})
			var lr bridge.LeaseResponse
			if r.status != 200 || json.Unmarshal(r.body, &lr) != nil {
				t.Fatalf("lease slot %d: %d %s", slot, r.status, r.body)
			}
			if lr.Assignment != nil {
				w.ack(lr.Assignment)
				return lr.Assignment
			}
		}
		t.Fatalf("nothing for slot %d", slot)
		return nil
	}
	hdr := map[string]string{expectedProfileHeader: profileStateful}
	body := func(hint, code string) string {
		return `{"lang":"py","code":"` + code + `","runtime_session_hint":"` + hint + `"}`
	}
	// conv-2 already ran on the worker: its next run is for that worker too.
	warmup := asyncClient(t, h, "/v1/exec", body("conv-2", "warm"), hdr)
	wu := leaseSlot(0)
	w.settle(wu, runnerReply(wu, w.incarnation))
	if r := recv(t, warmup); r.status != 200 {
		t.Fatalf("conv-2: %d %s", r.status, r.body)
	}
	first := asyncClient(t, h, "/v1/exec", body("conv-1", "one"), hdr)
	a := leaseSlot(0)
	second := asyncClient(t, h, "/v1/exec", body("conv-1", "two"), hdr)
	sid := a.RuntimeSessionID
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, err := h.store.Backend().ZCount(context.Background(), queueKey("default", "w:state-vm/"+sid), -1)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(end) {
			select {
			case r := <-second:
				t.Fatalf("the second exec of the session did not wait: %d %s", r.status, r.body)
			default:
				t.Fatal("the second exec of the session never queued")
			}
		}
	}
	other := asyncClient(t, h, "/v1/exec", body("conv-2", "other"), hdr)
	o := leaseSlot(1)
	if o.RuntimeSessionID != wu.RuntimeSessionID {
		t.Fatalf("the free slot went to %q, not conv-2's session", o.RuntimeSessionID)
	}
	w.settle(o, runnerReply(o, w.incarnation))
	if r := recv(t, other); r.status != 200 {
		t.Fatalf("other session: %d %s", r.status, r.body)
	}
	w.settle(a, runnerReply(a, w.incarnation))
	if r := recv(t, first); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	b := leaseSlot(0)
	if b.RuntimeSessionID != sid {
		t.Fatalf("the waiting exec ran in %q, not the session %q", b.RuntimeSessionID, sid)
	}
	w.settle(b, runnerReply(b, w.incarnation))
	if r := recv(t, second); r.status != 200 || !strings.Contains(string(r.body), `"stdout":"ran:two"`) || !strings.Contains(string(r.body), `"runtime_status":"reused"`) {
		t.Fatalf("second: %d %s", r.status, r.body)
	}

	// Control: a run that expired after its ack leaves the session quarantined, as before.
	late := asyncClient(t, h, "/v1/exec", body("conv-1", "late"), map[string]string{expectedProfileHeader: profileStateful, "X-Codellm-Timeout-Ms": "300"})
	leaseSlot(0)
	if r := recv(t, late); r.status != 504 {
		t.Fatalf("expired run: %d %s", r.status, r.body)
	}
	if r := h.client(t, "/v1/exec", body("conv-1", "after"), hdr); r.status != 409 || !strings.Contains(string(r.body), "session_quarantined") {
		t.Fatalf("after an expired run: %d %s", r.status, r.body)
	}
}
