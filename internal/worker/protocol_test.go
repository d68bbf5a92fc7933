package worker

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub"
)

func signedPost(t testing.TB, h *testHub, id *Identity, path string, body any, now time.Time) *http.Request {
	t.Helper()
	b, err := bridge.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := bridge.NewSignedRequest(context.Background(), h.base, path, b, id.Credential, id.PrivateKeyValue(), now)
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return req
}

func codeOf(r reply) bridge.Code { return bridge.DecodeError(r.status, r.body).Code }

// A forged signature, a replayed nonce and a skewed clock are rejected with their codes; a worker whose
// proofs are refused exits with the authentication code.
func TestProofRejections(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "w1")
	reg := bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: "w1", IncarnationID: bridge.NewID(),
		Capabilities: bridge.Capabilities{SandboxProfile: "codellm-embedded", Runtimes: []string{"python"}}}

	// Control: the same request, properly signed, is accepted (the probes below differ only in one thing).
	if r := doHTTP(t, signedPost(t, h, id, bridge.PathRegister(), reg, time.Now())); r.status != 200 {
		t.Fatalf("control register: %d %s", r.status, r.body)
	}
	// Replayed nonce: the identical signed request twice.
	req := signedPost(t, h, id, bridge.PathRegister(), reg, time.Now())
	again, _ := http.NewRequest(req.Method, req.URL.String(), nil)
	again.Header = req.Header.Clone()
	again.Body, _ = req.GetBody()
	again.URL.RawPath = req.URL.RawPath
	if r := doHTTP(t, req); r.status != 200 {
		t.Fatalf("first use: %d %s", r.status, r.body)
	}
	if r := doHTTP(t, again); r.status != 401 || codeOf(r) != bridge.CodeProofReplayed {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	// Skewed clock, both directions.
	for _, skew := range []time.Duration{-61 * time.Second, 61 * time.Second} {
		if r := doHTTP(t, signedPost(t, h, id, bridge.PathRegister(), reg, time.Now().Add(skew))); r.status != 401 || codeOf(r) != bridge.CodeProofInvalid {
			t.Fatalf("skew %v: %d %s", skew, r.status, r.body)
		}
	}
	// Forged signature: a valid-looking signature by a key the hub does not know.
	_, other, _ := ed25519.GenerateKey(nil)
	forged := *id
	forged.priv = other
	if r := doHTTP(t, signedPost(t, h, &forged, bridge.PathRegister(), reg, time.Now())); r.status != 401 || codeOf(r) != bridge.CodeProofInvalid {
		t.Fatalf("forged: %d %s", r.status, r.body)
	}

	// The worker loop with a forged key stops with exit code 3 and names the code.
	pub, priv, _ := bridge.GenerateKey()
	forged.PublicKey, _ = bridge.MarshalPublicKeyPEM(pub)
	forged.PrivateKey, _ = bridge.MarshalPrivateKeyPEM(priv)
	if err := forged.Validate(); err != nil {
		t.Fatal(err)
	}
	r := start(t, baseConfig(h, &forged, path, newEmbedded(t, false)))
	err := r.wait(t, 20*time.Second)
	var be *bridge.Error
	if ExitCode(err) != ExitAuth || !errors.As(err, &be) || be.Code != bridge.CodeProofInvalid {
		t.Fatalf("forged worker: exit %d, %v", ExitCode(err), err)
	}
}

// The credential rotates in the middle of a long assignment: the new one is persisted before use, the
// assignment still settles, and the old credential is dead.
//
// Timing: with TTL 5 s and a 2.5 s refresh window the worker rotates every ~2.5 s, so the 5 s run spans at
// least one rotation, while each refresh has 2.5 s to get through (and its reply 2.5 s to clear the
// refresh threshold) on a loaded machine. Narrower margins (TTL 3 s, window 1.5 s) made the test measure
// scheduler latency instead of the protocol.
func TestCredentialRotationDuringAssignment(t *testing.T) {
	h := newTestHub(t, func(c *hub.Config) { c.CredentialTTL = 5 * time.Second })
	id, path := h.pair(t, "rot")
	old := id.Credential
	cfg := baseConfig(h, id, path, newEmbedded(t, false))
	cfg.Timing.RefreshWindow = 2500 * time.Millisecond
	cfg.Timing.InitialClockOffset = -1
	r := start(t, cfg)
	h.waitReady(t, "rot")
	before := strings.Count(r.logs.String(), "credential rotated")
	rep := h.exec(t, "py", "import time\nfor i in range(5):\n    time.sleep(1)\nprint('survived')", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "survived\n" {
		t.Fatalf("exec: %d %s", rep.status, rep.body)
	}
	if n := strings.Count(r.logs.String(), "credential rotated") - before; n < 1 {
		t.Fatalf("no rotation during the 5 s run:\n%s", r.logs.String())
	}
	cur := r.w.Credential()
	if cur == old {
		t.Fatal("credential never rotated")
	}
	onDisk, err := LoadIdentity(path, "rot")
	if err != nil || onDisk.Credential != cur {
		t.Fatalf("identity on disk %v does not hold the credential in use", err)
	}
	if n := strings.Count(r.logs.String(), "credential rotated"); n < 2 {
		t.Fatalf("expected several rotations (TTL 5 s, pairing to the end of a 5 s run), saw %d:\n%s", n, r.logs.String())
	}
	stale := *id
	stale.Credential = old
	reg := bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: "rot", IncarnationID: bridge.NewID(),
		Capabilities: bridge.Capabilities{SandboxProfile: "x", Runtimes: []string{}}}
	if rr := doHTTP(t, signedPost(t, h, &stale, bridge.PathRegister(), reg, time.Now())); rr.status != 401 || codeOf(rr) != bridge.CodeCredentialInvalid {
		t.Fatalf("old credential: %d %s", rr.status, rr.body)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// gateSupervisor holds an execution until released, so a test can place a hub event inside the run.
type gateSupervisor struct {
	constSupervisor
	running chan struct{} // closed when Execute starts
	release chan struct{} // Execute returns once this is closed
}

func (g *gateSupervisor) Execute(ctx context.Context, call RunnerCall) (*bridge.Object, error) {
	close(g.running)
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, &RunError{Message: "aborted", KnownClean: true}
	}
	return g.constSupervisor.Execute(ctx, call)
}

// A credential refresh is still in flight when the run ends (a slow hub on a loaded machine). The hub
// has already rotated, so the old credential is dead: the worker must wait for the refresh reply instead
// of abandoning it with the run's tasks, or it settles with a dead credential (CREDENTIAL_INVALID, exit 3)
// and the client never gets its result. Deterministic: the hub's reply is held until the run has ended.
func TestCredentialRotationInFlightWhenRunEnds(t *testing.T) {
	h := newTestHub(t, func(c *hub.Config) { c.CredentialTTL = 3 * time.Second })
	id, path := h.pair(t, "inflight")
	reply, _ := bridge.ParseObject([]byte(`{"run":{"stdout":"done\n","stderr":"","code":0,"signal":null,"output":"done\n"},"language":"python","version":"3"}`))
	sup := &gateSupervisor{constSupervisor: constSupervisor{reply: reply}, running: make(chan struct{}), release: make(chan struct{})}
	var held atomic.Bool
	h.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/credentials/refresh") || !isClosed(sup.running) || !held.CompareAndSwap(false, true) {
			return false
		}
		rec := httptest.NewRecorder()
		h.Hub.ServeHTTP(rec, r) // the rotation is committed: the old credential is dead from here on
		close(sup.release)      // the run ends while this refresh is unanswered
		select {                // a worker that abandons the refresh hangs up; one that waits gets the reply
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return true
	})
	cfg := baseConfig(h, id, path, sup)
	cfg.Timing.RefreshWindow = 1500 * time.Millisecond
	cfg.Timing.InitialClockOffset = -1
	r := start(t, cfg)
	h.waitReady(t, "inflight")
	rep := h.exec(t, "py", "print('done')", map[string]string{"X-Codellm-Timeout-Ms": "20000"})
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "done\n" {
		t.Fatalf("exec: %d %s", rep.status, rep.body)
	}
	if !held.Load() {
		t.Fatal("no credential refresh happened during the run")
	}
	onDisk, err := LoadIdentity(path, "inflight")
	if err != nil || onDisk.Credential != r.w.Credential() {
		t.Fatalf("identity on disk %v does not hold the credential in use", err)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A second incarnation fences the first: the first exits 4, the second serves.
func TestSecondIncarnationFencesFirst(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "twin")
	sup := newEmbedded(t, false)
	a := start(t, baseConfig(h, id, path, sup))
	h.waitReady(t, "twin")
	b := start(t, baseConfig(h, id, path, sup))
	err := a.wait(t, 20*time.Second)
	if ExitCode(err) != ExitFenced {
		t.Fatalf("first incarnation: exit %d (%v)", ExitCode(err), err)
	}
	rep := h.exec(t, "bash", "echo from-b", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "from-b\n" {
		t.Fatalf("exec: %d %s", rep.status, rep.body)
	}
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Driving one worker's own calls: a duplicate settlement with the same bytes is accepted again; a
// different one gets 409 ASSIGNMENT_FENCED; the client sees the first result.
func TestSettlementIdempotency(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "idem")
	w, err := New(baseConfig(h, id, path, newEmbedded(t, false)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := w.register(ctx, false); err != nil {
		t.Fatal(err)
	}
	got := make(chan reply, 1)
	go func() { got <- h.exec(t, "py", "print(1)", nil) }()
	var a *bridge.Assignment
	for a == nil {
		if a, err = w.lease(ctx, -1); err != nil {
			t.Fatal(err)
		}
		_ = w.register(ctx, false)
	}
	body, _ := bridge.Marshal(bridge.AckRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, Generation: a.Generation, LeaseToken: a.LeaseToken})
	if err := w.do(ctx, bridge.PathAck("idem", a.AssignmentID), body, time.Second, &bridge.AcceptedResponse{}); err != nil {
		t.Fatal(err)
	}
	res, _ := bridge.ParseObject([]byte(`{"run":{"stdout":"first\n","stderr":"","code":0,"signal":null,"output":"first\n"},"language":"python","version":"3"}`))
	s := fulfillment(a, w.incarnation, res)
	until := time.Now().Add(5 * time.Second)
	if err := w.settle(ctx, a, s, until); err != nil {
		t.Fatal(err)
	}
	if err := w.settle(ctx, a, s, until); err != nil {
		t.Fatalf("duplicate identical settlement: %v", err)
	}
	other, _ := bridge.ParseObject([]byte(`{"run":{"stdout":"second\n","stderr":"","code":0,"signal":null,"output":"second\n"},"language":"python","version":"3"}`))
	err = w.settle(ctx, a, fulfillment(a, w.incarnation, other), until)
	var be *bridge.Error
	if !errors.As(err, &be) || be.Status != 409 || be.Code != bridge.CodeAssignmentFenced {
		t.Fatalf("conflicting settlement: %v", err)
	}
	rep := <-got
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "first\n" {
		t.Fatalf("client: %d %s", rep.status, rep.body)
	}
}

// An exec whose deadline is shorter than the run: the hub's run_timeout (below its deadline) stops the
// program, the client gets 200 with the partial output and why it stopped, and the worker is free again
// at once.
func TestExpiryAbortsRun(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "exp")
	r := start(t, baseConfig(h, id, path, newEmbedded(t, false)))
	h.waitReady(t, "exp")
	rep := h.exec(t, "bash", "echo early; sleep 30; echo late", map[string]string{"X-Codellm-Timeout-Ms": "1500"})
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "early\n" || !strings.Contains(m["stderr"].(string), "timed out") {
		t.Fatalf("expired exec: %d %s", rep.status, rep.body)
	}
	// Not a timing assertion: a worker still running `sleep 30` would leave this one queued behind it
	// (busy worker) well beyond the generous deadline below.
	rep = h.exec(t, "bash", "echo next", map[string]string{"X-Codellm-Timeout-Ms": "20000"})
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "next\n" {
		t.Fatalf("next exec: %d %s", rep.status, rep.body)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A client that goes away cancels the running block: the worker polls the cancellation, kills the run and
// settles a rejection, so the next request runs long before the cancelled `sleep 60` would have ended.
func TestCancellationStopsRunningBlock(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "can")
	r := start(t, baseConfig(h, id, path, newEmbedded(t, false)))
	h.waitReady(t, "can")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan reply, 1)
	b, _ := json.Marshal(map[string]string{"lang": "bash", "code": "sleep 60; echo never"})
	go func() { done <- h.client(t, ctx, "/v1/exec", string(b), nil) }()
	// Let the worker lease, ack and start it, then disconnect.
	time.Sleep(1500 * time.Millisecond)
	cancel()
	<-done
	start := time.Now()
	rep := h.exec(t, "bash", "echo after", map[string]string{"X-Codellm-Timeout-Ms": "30000"})
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "after\n" {
		t.Fatalf("next exec: %d %s", rep.status, rep.body)
	}
	if waited := time.Since(start); waited > 20*time.Second {
		t.Fatalf("the cancelled run was not stopped (next request waited %v)", waited)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Issue 40 item 11: a worker with the protocol's refresh timing (60 s window, +60 s initial clock
// offset) cannot live on a 2-minute credential: it finds the paired one due at once, refreshes, and
// rejects the new one as not later than its threshold (exit 3, 401 for good after). hub.MinCredentialTTL,
// the least `codellm hub serve` accepts, keeps it running with no refresh at all until the credential is
// near its end. The hub side (serve refusing the shorter TTL) is hub's TestServeConfigRules.
func TestMinCredentialTTL(t *testing.T) {
	for _, c := range []struct {
		ttl     time.Duration
		refused bool
	}{{2 * time.Minute, true}, {hub.MinCredentialTTL, false}} {
		h := newTestHub(t, func(cfg *hub.Config) { cfg.CredentialTTL = c.ttl })
		id, path := h.pair(t, "ttl")
		cfg := baseConfig(h, id, path, newEmbedded(t, false))
		if cfg.Timing.RefreshWindow != 0 || cfg.Timing.InitialClockOffset != 0 {
			t.Fatal("the test needs the worker's default refresh window and clock offset")
		}
		r := start(t, cfg)
		if c.refused {
			err := r.wait(t, 20*time.Second)
			if ExitCode(err) != ExitAuth || !strings.Contains(err.Error(), "not after the refresh threshold") {
				t.Fatalf("TTL %v: exit %d, %v", c.ttl, ExitCode(err), err)
			}
			continue
		}
		h.waitReady(t, "ttl")
		if strings.Contains(r.logs.String(), "credential rotated") || r.w.Credential() != id.Credential {
			t.Fatalf("TTL %v: the worker refreshed a fresh credential:\n%s", c.ttl, r.logs.String())
		}
		if err := r.stop(t); err != nil {
			t.Fatalf("TTL %v: %v", c.ttl, err)
		}
	}
}
