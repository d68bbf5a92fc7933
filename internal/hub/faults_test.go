package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/hub/storetest"
)

// procWorker is a test worker paired with a hub process through its admin route.
func procWorker(t *testing.T, base, id string) *testWorker {
	t.Helper()
	pub, priv, _ := bridge.GenerateKey()
	pubPEM, _ := bridge.MarshalPublicKeyPEM(pub)
	w := &testWorker{t: t, base: base, id: id, priv: priv, pubPEM: pubPEM, incarnation: bridge.NewID(),
		caps: bridge.Capabilities{SandboxProfile: "codellm-embedded", Runtimes: []string{"python"}}}
	b, _ := bridge.Marshal(bridge.CreatePairingRequest{WorkerID: id})
	req, _ := http.NewRequest(http.MethodPost, base+"/bridge/pairings", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	r := doHTTP(t, req)
	var pr bridge.CreatePairingResponse
	if r.status != 200 || json.Unmarshal(r.body, &pr) != nil {
		t.Fatalf("create pairing: %d %s", r.status, r.body)
	}
	r = w.redeem(pr.Code, pubPEM)
	var cr bridge.CredentialResponse
	if r.status != 200 || json.Unmarshal(r.body, &cr) != nil {
		t.Fatalf("redeem: %d %s", r.status, r.body)
	}
	w.credential = cr.Credential
	return w
}

// keyedExec posts /v1/exec with an Idempotency-Key; a transport error (the hub was killed) is status -1.
func keyedExec(url, code, key string) reply {
	return execOn(url, `{"lang":"py","code":"`+code+`"}`, map[string]string{"Idempotency-Key": key})
}

// Issue 35 item 14: a hub on the embedded store is killed (SIGKILL) while a worker runs a request that
// carries an Idempotency-Key; the client's retry, to the restarted hub, must not run the code again.
// The claim survives in the bbolt file and its holder (the killed process) is gone, so the retry is told
// the outcome is unknown (502 outcome_unknown) and the worker never receives the request a second time.
// Before the fix the claim lived in memory only and the retry ran the code again.
func TestIdempotencyAcrossHubKill(t *testing.T) {
	storePath := filepath.Join(t.TempDir(), "hub", "bridge.db")
	env := []string{"CODELLM_HUB_ADMIN_TOKEN=" + adminToken}
	p := startHubProcess(t, env, "--listen", "127.0.0.1:0", "--api-key", apiKey, "--store", storePath)
	w := procWorker(t, p.url+"/v1", "kill:vm")
	var runs atomic.Int64
	w.mustRegister()

	first := make(chan reply, 1)
	go func() { first <- keyedExec(p.url, "once", "kill-key-1") }()
	a := w.mustLease()
	if r := w.ack(a); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	runs.Add(1) // the worker now runs it
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.wait(t)
	if r := <-first; r.status != -1 {
		t.Fatalf("the killed hub answered: %d %s", r.status, r.body)
	}

	p2 := startHubProcess(t, env, "--listen", "127.0.0.1:0", "--api-key", apiKey, "--store", storePath)
	w.base = p2.url + "/v1"
	w.mustRegister()
	stop := w.serve(func(x *bridge.Assignment) bridge.Settlement {
		runs.Add(1)
		return runnerReply(x, w.incarnation)
	})
	defer stop()
	for range 2 {
		r := keyedExec(p2.url, "once", "kill-key-1")
		if r.status != 502 || !strings.Contains(string(r.body), `"error":"outcome_unknown"`) {
			t.Fatalf("retry after the kill: %d %s (runs %d)", r.status, r.body, runs.Load())
		}
	}
	// The hub and the worker still work: a new key runs once.
	if r := keyedExec(p2.url, "fresh", "kill-key-2"); r.status != 200 || !strings.Contains(string(r.body), "ran:fresh") {
		t.Fatalf("new key: %d %s", r.status, r.body)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the worker ran %d requests, want 2 (the killed one once, the new one)", n)
	}
}

// A claim is bound by its request's deadline plus the grace, not by the longest deadline: a repeat of a
// request whose run outlived that bound (its holder hung) is answered 502 outcome_unknown at once.
func TestIdempotencyClaimBound(t *testing.T) {
	h := newTestHub(t, nil)
	is := h.idem.Store.(*backendIdem)
	ctx := context.Background()
	if e, err := is.Claim(ctx, "bound", "fp", 2*time.Second); e != nil || err != nil {
		t.Fatalf("claim: %v %v", e, err)
	}
	if e, err := is.Claim(ctx, "bound", "fp", time.Minute); err != nil || e == nil || e.Done {
		t.Fatalf("a live claim: %+v %v", e, err)
	}
	time.Sleep(2100 * time.Millisecond)
	e, err := is.Claim(ctx, "bound", "fp", time.Minute)
	if err != nil || e == nil || !e.Done || e.Response == nil || !e.Response.Lost {
		t.Fatalf("a claim past its bound: %+v %v", e, err)
	}
	if err := is.Release(ctx, "bound"); err != nil {
		t.Fatal(err)
	}
	if e, _ := is.Claim(ctx, "bound", "fp", time.Minute); e == nil || !e.Done {
		t.Fatalf("releasing a claim past its bound freed the key: %+v", e)
	}
}

// execOn posts /v1/exec to a hub root URL with extra headers; a transport error is status -1.
func execOn(url, body string, hdr map[string]string) reply {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/exec", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return reply{resp.StatusCode, buf.Bytes(), resp.Header}
}

// A stateful session continues on its worker after the hub (embedded store) is killed and restarted:
// the session → worker record is in the bbolt file. Before, the restarted hub knew the session only from
// the file store and sent it, without affinity, to whichever stateful worker came first — a run in an
// empty workspace. Once the session's worker registers as another incarnation, the session is refused
// as lost (409 session_lost), never run elsewhere.
func TestSessionSurvivesHubRestart(t *testing.T) {
	storePath := filepath.Join(t.TempDir(), "hub", "bridge.db")
	env := []string{"CODELLM_HUB_ADMIN_TOKEN=" + adminToken}
	p := startHubProcess(t, env, "--listen", "127.0.0.1:0", "--api-key", apiKey, "--store", storePath)
	own := procWorker(t, p.url+"/v1", "z-state")
	other := procWorker(t, p.url+"/v1", "a-other")
	for _, w := range []*testWorker{own, other} {
		w.caps.StatefulWorkspace = true
		w.mustRegister()
	}
	first := make(chan reply, 1)
	go func() {
		first <- execOn(p.url, `{"lang":"py","code":"x=1"}`, map[string]string{"X-Codellm-Worker-Id": own.id})
	}()
	a := own.mustLease()
	own.ack(a)
	own.settle(a, runnerReply(a, own.incarnation))
	r := <-first
	var out struct {
		SessionID string `json:"session_id"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &out) != nil || a.RuntimeSessionID != out.SessionID {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.wait(t)

	p2 := startHubProcess(t, env, "--listen", "127.0.0.1:0", "--api-key", apiKey, "--store", storePath)
	for _, w := range []*testWorker{own, other} {
		w.base = p2.url + "/v1"
		w.mustRegister()
	}
	var otherRan atomic.Int64
	stop := other.serve(func(x *bridge.Assignment) bridge.Settlement {
		otherRan.Add(1)
		return runnerReply(x, other.incarnation)
	})
	defer stop()
	sess := `{"lang":"py","code":"print(x)","session_id":"` + out.SessionID + `"}`
	second := make(chan reply, 1)
	go func() { second <- execOn(p2.url, sess, nil) }()
	b := own.mustLease()
	if b.RuntimeSessionID != out.SessionID {
		t.Fatalf("runtimeSessionId %q, want %q", b.RuntimeSessionID, out.SessionID)
	}
	own.ack(b)
	own.settle(b, runnerReply(b, own.incarnation))
	if r := <-second; r.status != 200 || !strings.Contains(string(r.body), out.SessionID) {
		t.Fatalf("session after the restart: %d %s", r.status, r.body)
	}
	// The worker restarts: its session's files are gone with the old process.
	own.incarnation = bridge.NewID()
	own.mustRegister()
	if r := execOn(p2.url, sess, nil); r.status != 409 || !strings.Contains(string(r.body), `"error":"session_lost"`) {
		t.Fatalf("session after its worker restarted: %d %s", r.status, r.body)
	}
	// `codellm worker reset-workspace` (an incarnation of its own) acknowledges the loss: the session
	// continues, empty, on the worker's next incarnation.
	if r := own.send(context.Background(), bridge.PathReset(own.id), bridge.ResetRequest{ProtocolVersion: 1, IncarnationID: own.incarnation,
		RuntimeSessionID: out.SessionID, ConfirmDiscarded: true}); r.status != 200 {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	own.incarnation = bridge.NewID()
	own.mustRegister()
	third := make(chan reply, 1)
	go func() { third <- execOn(p2.url, sess, nil) }()
	c := own.mustLease()
	own.ack(c)
	own.settle(c, runnerReply(c, own.incarnation))
	if r := <-third; r.status != 200 || c.RuntimeSessionID != out.SessionID {
		t.Fatalf("session after the reset: %d %s", r.status, r.body)
	}
	if n := otherRan.Load(); n != 0 {
		t.Fatalf("the other stateful worker ran %d of the session's requests", n)
	}
}

// Work a dead replica dispatched and nobody waits for any more is ended by the other replicas' sweep: a
// queued assignment is dropped before any worker runs it, and the worker it locked is free again.
// ("ghost" stands for a replica killed right after its Enqueue: its heartbeat is gone.)
func TestSweepEndsDeadReplicasWork(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.replicaBeat = 50 * time.Millisecond })
	w := newWorker(t, h, "sweep-vm")
	w.pair(h)
	w.mustRegister()
	ctx := context.Background()
	b := h.store.Backend()
	if err := b.Update(ctx, func(tx store.Txn) error { tx.SetAdd(replicasSet, "ghost"); return nil }); err != nil {
		t.Fatal(err)
	}
	a, err := h.store.Enqueue(ctx, store.EnqueueParams{WorkerID: w.id, AssignmentID: bridge.NewID(), LeaseTokenHash: "h",
		ExpiresAt: time.Now().Add(time.Minute), ExecutionKind: bridge.KindSandbox, Request: []byte(`{"body":{},"headers":{}}`), Dispatcher: "ghost"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := h.store.Worker(ctx, w.id)
		if err == nil && !st.Busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead replica's assignment still locks the worker")
		}
	}
	if r, got := w.lease(ctx, 100); r.status != 200 || got != nil {
		t.Fatalf("the dead replica's assignment %s was delivered: %d %+v", a.ID, r.status, got)
	}
	if m, _ := b.Members(ctx, replicasSet); slices.Contains(m, "ghost") {
		t.Fatal("the swept replica is still listed")
	}
}

// lostEnqueue stores an Enqueue and then reports a store failure, as when Redis applied the transaction
// and the connection broke before its reply; the store then stays down for a while.
type lostEnqueue struct {
	*store.Protocol
	fb   *storetest.FaultBackend
	down time.Duration
}

func (l *lostEnqueue) Enqueue(ctx context.Context, p store.EnqueueParams) (*store.Assignment, error) {
	if _, err := l.Protocol.Enqueue(ctx, p); err != nil {
		return nil, err
	}
	l.fb.SetDown(true)
	time.AfterFunc(l.down, func() { l.fb.SetDown(false) })
	return nil, store.Unavailable(errors.New("reply lost"))
}

// An enqueue whose reply was lost in a store outage may have been stored, and a worker may lease it when
// the store returns. The client is answered 503 (nothing ran) only once the hub took it back; if the
// worker acknowledged it first, the answer is 502 outcome_unknown. Before, the hub gave up withdrawing
// after a second, answered 503, and the worker ran the request after the outage anyway.
func TestLostEnqueueReplyDuringOutage(t *testing.T) {
	bs, err := boltstore.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	fb := storetest.NewFaultBackend(bs.Backend())
	st := &lostEnqueue{Protocol: store.NewProtocol(fb, store.Options{}), fb: fb, down: 1500 * time.Millisecond}
	h, err := New(Config{AdminToken: adminToken, ClientKeys: []ClientKey{{Key: apiKey, TenantID: "default"}}, PollInterval: 20 * time.Millisecond}, st)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer func() { h.Close(); srv.Close(); _ = st.Close() }()
	th := &testHub{Hub: h, srv: srv, base: srv.URL + "/v1", store: bs}
	w := newWorker(t, th, "lost-vm")
	w.pair(th)
	w.mustRegister()

	resp := asyncClient(t, th, "/v1/exec", `{"lang":"py","code":"x"}`, nil)
	acked := make(chan bool, 1)
	go func() {
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if r, a := w.lease(context.Background(), 0); r.status == 200 && a != nil {
				acked <- w.ack(a).status == 200
				return
			}
		}
		acked <- false
	}()
	r := recv(t, resp)
	ran := <-acked
	switch {
	case ran && r.status != 502:
		t.Fatalf("the worker ran the request, and the client was told %d %s", r.status, r.body)
	case !ran && (r.status != 503 || !strings.Contains(string(r.body), "store_unavailable")):
		t.Fatalf("nothing ran, and the client was told %d %s", r.status, r.body)
	}
}
