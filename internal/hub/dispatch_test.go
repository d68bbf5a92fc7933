package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/hub/store"
)

// asyncClient fires a client request in the background.
func asyncClient(t *testing.T, h *testHub, path, body string, hdr map[string]string) <-chan reply {
	ch := make(chan reply, 1)
	go func() { ch <- h.client(t, path, body, hdr) }()
	return ch
}

func recv(t *testing.T, ch <-chan reply) reply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(15 * time.Second):
		t.Fatal("client request hung")
	}
	return reply{}
}

func TestExecEndToEnd(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "exec-vm")
	w.pair(h)
	w.mustRegister()
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, w.incarnation) })
	defer stop()

	r := h.client(t, "/v1/exec", `{"lang":"py","code":"print(1)","args":["a"]}`, nil)
	if r.status != 200 {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
	var out struct {
		SessionID string `json:"session_id"`
		Stdout    string `json:"stdout"`
		Stderr    string `json:"stderr"`
	}
	_ = json.Unmarshal(r.body, &out)
	if out.Stdout != "ran:print(1)" || len(out.SessionID) != 21 || bytes.Contains(r.body, []byte(`"files"`)) {
		t.Fatalf("exec reply %s", r.body)
	}
	// The session is remembered; Bearer works as well as X-API-Key.
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/exec", strings.NewReader(`{"lang":"bash","code":"echo","session_id":"`+out.SessionID+`"}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if r := doHTTP(t, req); r.status != 200 || !bytes.Contains(r.body, []byte(out.SessionID)) {
		t.Fatalf("session reuse: %d %s", r.status, r.body)
	}
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"x","session_id":"nope-nope-nope-nope-n"}`, nil); r.status != 404 || !bytes.Contains(r.body, []byte("session_not_found")) {
		t.Fatalf("unknown session: %d %s", r.status, r.body)
	}
	if r := h.client(t, "/v1/exec", `{"lang":"cobol","code":"x"}`, nil); r.status != 400 {
		t.Fatalf("bad lang: %d %s", r.status, r.body)
	}
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, map[string]string{"X-API-Key": "wrong"}); r.status != 401 {
		t.Fatalf("bad key: %d %s", r.status, r.body)
	}
}

// A rejected settlement is a 502 for the client.
func TestExecRejected(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "rej-vm")
	w.pair(h)
	w.mustRegister()
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { return rejected(a, w.incarnation, "runner exploded") })
	defer stop()
	r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, nil)
	if r.status != 502 || !bytes.Contains(r.body, []byte(`"error":"execution_failed","message":"runner exploded"`)) {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// E10, E11: a second incarnation fences the first, unless the first holds an
// acknowledged assignment, which makes the worker busy.
func TestIncarnationFencing(t *testing.T) {
	h := newTestHub(t, nil)
	a := newWorker(t, h, "fence-vm")
	a.pair(h)
	a.mustRegister()
	b := *a
	b.incarnation = bridge.NewID()

	// B registers while A holds an acked assignment: WORKER_BUSY.
	resp := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"x"}`, nil)
	asg := a.mustLease()
	if r := a.ack(asg); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	r, _ := b.register()
	wantCode(t, r, 503, bridge.CodeWorkerBusy)
	if r := a.settle(asg, runnerReply(asg, a.incarnation)); r.status != 200 {
		t.Fatalf("settle: %d %s", r.status, r.body)
	}
	if r := recv(t, resp); r.status != 200 {
		t.Fatalf("client: %d %s", r.status, r.body)
	}
	// Now B takes over and A is fenced everywhere.
	b.mustRegister()
	r, _ = a.register()
	wantCode(t, r, 409, bridge.CodeWorkerFenced)
	r, _ = a.lease(context.Background(), 0)
	wantCode(t, r, 409, bridge.CodeWorkerFenced)
	wantCode(t, a.send(context.Background(), bridge.PathReset(a.id), bridge.ResetRequest{ProtocolVersion: 1, IncarnationID: a.incarnation, RuntimeSessionID: "s", ConfirmDiscarded: true}), 409, bridge.CodeWorkerFenced)
	stop := b.serve(func(x *bridge.Assignment) bridge.Settlement { return runnerReply(x, b.incarnation) })
	defer stop()
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"after"}`, nil); r.status != 200 {
		t.Fatalf("B serves: %d %s", r.status, r.body)
	}
}

// E12–E17: fencing fields, idempotent and conflicting settlements, unknown
// assignments, another worker's assignment and lease redelivery.
func TestSettlement(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "settle-vm")
	w.pair(h)
	w.mustRegister()
	other := newWorker(t, h, "other-vm")
	other.pair(h)

	resp := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"x"}`, map[string]string{"X-Codellm-Worker-Id": w.id})
	a := w.mustLease()
	// E17: the lease reply was lost; leasing again redelivers it.
	_, again := w.lease(context.Background(), 0)
	if again == nil || again.AssignmentID != a.AssignmentID || again.LeaseToken != a.LeaseToken {
		t.Fatalf("redelivery: %+v", again)
	}
	if a.RemainingMs <= 0 || a.IncarnationID != w.incarnation || a.Generation < 1 {
		t.Fatalf("assignment %+v", a)
	}
	bad := *a
	bad.LeaseToken = bridge.NewSecret()
	wantCode(t, w.ack(&bad), 409, bridge.CodeAssignmentFenced)
	if r := w.ack(a); r.status != 200 || string(r.body) != `{"protocolVersion":1,"accepted":true}` {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	good := runnerReply(a, w.incarnation)
	// E12: wrong token, stale generation, another incarnation.
	s := good
	s.LeaseToken = bridge.NewSecret()
	wantCode(t, w.settle(a, s), 409, bridge.CodeAssignmentFenced)
	s = good
	s.Generation--
	if s.Generation < 1 {
		s.Generation = a.Generation + 1
	}
	wantCode(t, w.settle(a, s), 409, bridge.CodeAssignmentFenced)
	s = good
	s.IncarnationID = bridge.NewID()
	wantCode(t, w.settle(a, s), 409, bridge.CodeAssignmentFenced)
	// Another worker settling this assignment.
	wantCode(t, other.send(context.Background(), bridge.PathSettle(other.id, a.AssignmentID), good), 409, bridge.CodeWorkerMismatch)
	// E16: unknown assignment.
	wantCode(t, w.send(context.Background(), bridge.PathSettle(w.id, bridge.NewID()), good), 404, bridge.CodeAssignmentNotFound)
	// Invalid settlement body.
	wantCode(t, w.send(context.Background(), bridge.PathSettle(w.id, a.AssignmentID), []byte(`{"protocolVersion":1,"status":"fulfilled"}`)), 400, "")
	// E13: duplicate with identical bytes; E14: a different result.
	if r := w.settle(a, good); r.status != 200 {
		t.Fatalf("settle: %d %s", r.status, r.body)
	}
	if r := w.settle(a, good); r.status != 200 {
		t.Fatalf("duplicate settle: %d %s", r.status, r.body)
	}
	wantCode(t, w.settle(a, fulfilled(a, w.incarnation, `{"run":{"stdout":"different"}}`)), 409, bridge.CodeAssignmentFenced)
	if r := recv(t, resp); r.status != 200 || !bytes.Contains(r.body, []byte("ran:x")) {
		t.Fatalf("client: %d %s", r.status, r.body)
	}
	// After the client got its answer, a resend is still idempotent.
	if r := w.settle(a, good); r.status != 200 {
		t.Fatalf("late duplicate: %d %s", r.status, r.body)
	}
}

// E15, E20: a deadline shorter than the run gives the client 504; a late
// fulfilled settlement is ASSIGNMENT_EXPIRED, a late rejection is accepted.
func TestDeadlineExpiry(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "slow-vm")
	w.pair(h)
	w.mustRegister()
	resp := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"sleep"}`, map[string]string{"X-Codellm-Timeout-Ms": "1000"})
	a := w.mustLease()
	if a.RemainingMs > 1000 {
		t.Fatalf("remainingMs %d exceeds the client deadline", a.RemainingMs)
	}
	if r := w.ack(a); r.status != 200 {
		t.Fatal(r.status)
	}
	r := recv(t, resp)
	if r.status != 504 || !bytes.Contains(r.body, []byte("execution_timeout")) {
		t.Fatalf("client: %d %s", r.status, r.body)
	}
	// The cancellation poll now reads true.
	c := w.send(context.Background(), bridge.PathCancellation(w.id, a.AssignmentID), bridge.CancellationRequest{ProtocolVersion: 1, IncarnationID: w.incarnation})
	if string(c.body) != `{"protocolVersion":1,"cancelled":true}` {
		t.Fatalf("cancellation: %s", c.body)
	}
	wantCode(t, w.settle(a, runnerReply(a, w.incarnation)), 409, bridge.CodeAssignmentExpired)
	if r := w.settle(a, rejected(a, w.incarnation, "Bridge assignment expired")); r.status != 200 {
		t.Fatalf("late rejection: %d %s", r.status, r.body)
	}
	// The late rejection released the worker: the next request runs.
	stop := w.serve(func(x *bridge.Assignment) bridge.Settlement { return runnerReply(x, w.incarnation) })
	defer stop()
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"next"}`, nil); r.status != 200 {
		t.Fatalf("after expiry: %d %s", r.status, r.body)
	}
}

// E19: a client that disconnects sets the cancellation mark, which the
// worker's poll sees; its rejection then frees the worker.
func TestClientDisconnectCancels(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "cancel-vm")
	w.pair(h)
	w.mustRegister()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/exec", strings.NewReader(`{"lang":"bash","code":"sleep 60"}`))
		req.Header.Set("X-API-Key", apiKey)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	a := w.mustLease()
	if r := w.ack(a); r.status != 200 {
		t.Fatal(r.status)
	}
	poll := func() string {
		return string(w.send(context.Background(), bridge.PathCancellation(w.id, a.AssignmentID), bridge.CancellationRequest{ProtocolVersion: 1, IncarnationID: w.incarnation}).body)
	}
	if p := poll(); p != `{"protocolVersion":1,"cancelled":false}` {
		t.Fatalf("before disconnect: %s", p)
	}
	cancel()
	<-done
	deadline := time.Now().Add(5 * time.Second)
	for poll() != `{"protocolVersion":1,"cancelled":true}` {
		if time.Now().After(deadline) {
			t.Fatal("cancellation not visible within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := w.settle(a, rejected(a, w.incarnation, "aborted")); r.status != 200 {
		t.Fatalf("settle after cancel: %d %s", r.status, r.body)
	}
	stop := w.serve(func(x *bridge.Assignment) bridge.Settlement { return runnerReply(x, w.incarnation) })
	defer stop()
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"next"}`, nil); r.status != 200 {
		t.Fatalf("worker not released: %d %s", r.status, r.body)
	}
}

// The hub notices a crashed worker through registration expiry: work it never acknowledged moves to
// another worker. Work it acknowledged may have run (a worker stopped or cut off past its registration,
// issue 36): it is never sent to another worker, and the client is told the outcome is unknown (502), not
// a 503 or 429 that would make it retry and run the code a second time.
func TestCrashedWorker(t *testing.T) {
	h := newTestHub(t, nil, boltstore.WithLeaseTTL(time.Second))
	crash := newWorker(t, h, "a-crash")
	crash.pair(h)
	good := newWorker(t, h, "b-good")
	good.pair(h)
	good.mustRegister()
	crash.mustRegister() // registered, then never polls again
	var goodRan sync.Map
	serve := func() func() {
		return good.serve(func(x *bridge.Assignment) bridge.Settlement {
			goodRan.Store(x.AssignmentID, true)
			return runnerReply(x, good.incarnation)
		})
	}
	stop := serve()

	start := time.Now()
	r := h.client(t, "/v1/exec", `{"lang":"py","code":"moved"}`, map[string]string{"X-Codellm-Timeout-Ms": "10000"})
	if r.status != 200 || !bytes.Contains(r.body, []byte("ran:moved")) {
		t.Fatalf("reassignment: %d %s", r.status, r.body)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("reassignment took %v", time.Since(start))
	}
	stop()
	waitOffline(t, h, good.id)
	goodRan.Clear()

	// Crash after ack, with another worker ready to take work: the run is not repeated there.
	crash.mustRegister()
	resp := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"x"}`, map[string]string{"X-Codellm-Timeout-Ms": "20000"})
	a := crash.mustLease()
	if r := crash.ack(a); r.status != 200 {
		t.Fatal(r.status)
	}
	stop = serve()
	defer stop()
	start = time.Now()
	r = recv(t, resp)
	if r.status != 502 || !bytes.Contains(r.body, []byte(`"error":"outcome_unknown"`)) || r.header.Get("Retry-After") != "" ||
		time.Since(start) > 10*time.Second {
		t.Fatalf("crash after ack: %d %s after %v", r.status, r.body, time.Since(start))
	}
	goodRan.Range(func(k, _ any) bool {
		t.Errorf("another worker ran %v after the first acknowledged the request", k)
		return true
	})
}

// waitOffline waits until the worker's registration has lapsed.
func waitOffline(t *testing.T, h *testHub, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := h.store.Worker(context.Background(), id)
		if err == nil && !st.Online {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s still online", id)
		}
	}
}

// E33: no worker → 503 after the queue wait (one may register meanwhile: TestQueueWhileNoWorker); all
// busy → 429 after the queue wait; a full queue → 429 at once.
func TestOverload(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.QueueMax = 1; c.QueueTimeout = 400 * time.Millisecond })
	r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, nil)
	if r.status != 503 || r.header.Get("Retry-After") != "5" || !bytes.Contains(r.body, []byte("worker_unavailable")) {
		t.Fatalf("no worker: %d %s", r.status, r.body)
	}
	w := newWorker(t, h, "busy-vm")
	w.pair(h)
	w.mustRegister()
	first := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"hold"}`, map[string]string{"X-Codellm-Timeout-Ms": "5000"})
	a := w.mustLease()
	if r := w.ack(a); r.status != 200 {
		t.Fatal(r.status)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var queued reply
	go func() { defer wg.Done(); queued = h.client(t, "/v1/exec", `{"lang":"py","code":"q"}`, nil) }()
	// Wait until the second request sits in the queue.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if waitingExecs(t, h) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("request never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	full := h.client(t, "/v1/exec", `{"lang":"py","code":"full"}`, nil)
	if full.status != 429 || full.header.Get("Retry-After") == "" || time.Since(start) > 300*time.Millisecond {
		t.Fatalf("full queue: %d %s after %v", full.status, full.body, time.Since(start))
	}
	wg.Wait()
	if queued.status != 429 || !bytes.Contains(queued.body, []byte(`"error":"rate_limited","retry_after_seconds":1`)) || queued.header.Get("Retry-After") != "1" {
		t.Fatalf("queued: %d %s", queued.status, queued.body)
	}
	w.settle(a, runnerReply(a, w.incarnation))
	if r := recv(t, first); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
}

// A queued request runs as soon as the worker is released.
func TestQueueWakesOnRelease(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "q-vm")
	w.pair(h)
	w.mustRegister()
	first := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"one"}`, nil)
	a := w.mustLease()
	w.ack(a)
	second := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"two"}`, nil)
	time.Sleep(100 * time.Millisecond)
	w.settle(a, runnerReply(a, w.incarnation))
	if r := recv(t, first); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	b := w.mustLease()
	w.ack(b)
	w.settle(b, runnerReply(b, w.incarnation))
	if r := recv(t, second); r.status != 200 || !bytes.Contains(r.body, []byte("ran:two")) {
		t.Fatalf("second: %d %s", r.status, r.body)
	}
}

func TestClientBodyLimit(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.MaxBody = 1024 })
	r := h.client(t, "/v1/exec", `{"lang":"py","code":"`+strings.Repeat("x", 2048)+`"}`, nil)
	if r.status != 413 || !bytes.Contains(r.body, []byte("request_too_large")) {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

// waitingExecs counts the plain /v1/exec requests of tenant "default" waiting in the store's queue.
func waitingExecs(t *testing.T, h *testHub) int {
	t.Helper()
	ctx := context.Background()
	p, err := h.makePlan(ctx, &dispatchReq{caller: &ClientKey{TenantID: "default"}, kind: bridge.KindSandbox})
	if err != nil {
		t.Fatal(err)
	}
	n, err := h.store.Backend().ZCount(ctx, queueKey("default", p.sig()), -1)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A worker that asks for lease slots (LibreChat's workspaceLeaseSlots) gets the grant in its registration
// reply, holds that many assignments at once, one per slot (each echoing its slot), and a request beyond
// them waits for a slot to be settled.
func TestLeaseSlots(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "slots-vm")
	w.caps.WorkspaceLeaseSlots = 3
	w.pair(h)
	if rr := w.mustRegister(); rr.WorkspaceLeaseSlots != 3 {
		t.Fatalf("granted %d slots", rr.WorkspaceLeaseSlots)
	}
	var resps []<-chan reply
	for i := range 4 {
		resps = append(resps, asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"s`+strconv.Itoa(i)+`"}`, nil))
	}
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
				if lr.Assignment.WorkspaceLeaseSlot == nil || *lr.Assignment.WorkspaceLeaseSlot != slot {
					t.Fatalf("slot %d leased %+v", slot, lr.Assignment.WorkspaceLeaseSlot)
				}
				return lr.Assignment
			}
		}
		t.Fatalf("nothing for slot %d", slot)
		return nil
	}
	var held []*bridge.Assignment
	for slot := range 3 {
		a := leaseSlot(slot)
		if r := w.ack(a); r.status != 200 {
			t.Fatalf("ack slot %d: %d %s", slot, r.status, r.body)
		}
		held = append(held, a)
	}
	// The fourth request joins the queue once it finds no free slot, which a loaded machine may delay.
	for deadline := time.Now().Add(10 * time.Second); waitingExecs(t, h) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait, want the fourth", waitingExecs(t, h))
		}
	}
	w.settle(held[0], runnerReply(held[0], w.incarnation))
	fourth := leaseSlot(0)
	for _, a := range append(held[1:], fourth) {
		w.ack(a)
		w.settle(a, runnerReply(a, w.incarnation))
	}
	for i, ch := range resps {
		if r := recv(t, ch); r.status != 200 || !bytes.Contains(r.body, []byte("ran:s")) {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
}

// settleDuringEnqueue is the hub's store with a hook that runs after an enqueue committed and before
// Enqueue returns to the dispatcher.
type settleDuringEnqueue struct {
	*boltstore.Store
	hook func()
}

func (s *settleDuringEnqueue) Enqueue(ctx context.Context, ep store.EnqueueParams) (*store.Assignment, error) {
	a, err := s.Store.Enqueue(ctx, ep)
	if err == nil && s.hook != nil {
		s.hook()
	}
	return a, err
}

// A worker that leases, runs and settles an assignment before Enqueue has returned to its dispatcher (a
// waiting worker on a fast store can) still answers the client at once: the dispatcher watches the
// settlement from before the enqueue. Without that watch the notification went to nobody and the client
// waited for the backstop poll (an hour here; recv gives up after 15 s).
func TestSettledBeforeEnqueueReturns(t *testing.T) {
	wrapped := &settleDuringEnqueue{}
	h := newTestHubOver(t, func(c *Config) { c.PollInterval = time.Hour },
		func(st *boltstore.Store) Store { wrapped.Store = st; return wrapped })
	w := newWorker(t, h, "fast-vm")
	w.pair(h)
	w.mustRegister()
	wrapped.hook = func() {
		a := w.mustLease()
		if r := w.ack(a); r.status != 200 {
			t.Errorf("ack: %d %s", r.status, r.body)
			return
		}
		if r := w.settle(a, runnerReply(a, w.incarnation)); r.status != 200 {
			t.Errorf("settle: %d %s", r.status, r.body)
		}
	}
	r := recv(t, asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"print(7)"}`, nil))
	if r.status != 200 || !bytes.Contains(r.body, []byte("ran:print(7)")) {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
}
