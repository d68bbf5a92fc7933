package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
)

// E23: a stateful assignment that expires after ack keeps its workspace
// fence; the session is quarantined until the worker resets it.
func TestStatefulSessionQuarantine(t *testing.T) {
	h := newTestHub(t, nil, boltstore.WithGrace(time.Second))
	w := newWorker(t, h, "state-vm")
	w.caps.StatefulWorkspace = true
	w.pair(h)
	w.mustRegister()

	resp := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"x=1"}`, nil)
	a := w.mustLease()
	w.ack(a)
	w.settle(a, runnerReply(a, w.incarnation))
	r := recv(t, resp)
	var out struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal(r.body, &out)
	if r.status != 200 || a.RuntimeSessionID != out.SessionID {
		t.Fatalf("first run: %d %s, runtimeSessionId %q", r.status, r.body, a.RuntimeSessionID)
	}
	sess := `{"lang":"py","code":"print(x)","session_id":"` + out.SessionID + `"}`

	resp = asyncClient(t, h, "/v1/exec", sess, map[string]string{"X-Codellm-Timeout-Ms": "800"})
	b := w.mustLease()
	if b.RuntimeSessionID != out.SessionID {
		t.Fatalf("affinity lost: %q", b.RuntimeSessionID)
	}
	w.ack(b)
	if r := recv(t, resp); r.status != 504 {
		t.Fatalf("expiry: %d %s", r.status, r.body)
	}
	reset := func() reply {
		return w.send(context.Background(), bridge.PathReset(w.id), bridge.ResetRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, RuntimeSessionID: out.SessionID, ConfirmDiscarded: true})
	}
	wantCode(t, reset(), 503, bridge.CodeWorkerBusy)
	wantCode(t, w.send(context.Background(), bridge.PathReset(w.id), []byte(`{"protocolVersion":1,"incarnationId":"`+w.incarnation+`","runtimeSessionId":"s","confirmDiscarded":false}`)), 400, "")
	time.Sleep(1100 * time.Millisecond) // the lock outlives the deadline by the grace period
	w.mustRegister()
	if r := h.client(t, "/v1/exec", sess, nil); r.status != 409 || !bytes.Contains(r.body, []byte("session_quarantined")) {
		t.Fatalf("quarantined session: %d %s", r.status, r.body)
	}
	if r := reset(); r.status != 200 || string(r.body) != `{"protocolVersion":1,"reset":true}` {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	resp = asyncClient(t, h, "/v1/exec", sess, nil)
	c := w.mustLease()
	w.ack(c)
	w.settle(c, runnerReply(c, w.incarnation))
	if r := recv(t, resp); r.status != 200 {
		t.Fatalf("after reset: %d %s", r.status, r.body)
	}

	// State cannot move: once another incarnation of the session's worker registered (the process that
	// held the session's files is gone), the session is refused as lost instead of running in an empty
	// workspace, here or on another stateful worker.
	other := newWorker(t, h, "other-state")
	other.caps.StatefulWorkspace = true
	other.pair(h)
	other.mustRegister()
	w.incarnation = bridge.NewID() // a new incarnation of the same worker, requiring readiness
	w.caps.RequiresReadyConfirmation = true
	rr := w.mustRegister()
	if r := h.client(t, "/v1/exec", sess, nil); r.status != 409 || !bytes.Contains(r.body, []byte(`"error":"session_lost"`)) {
		t.Fatalf("session after its worker restarted: %d %s", r.status, r.body)
	}
	// An unready worker is not dispatched; readiness confirmation makes it dispatchable again.
	pin := map[string]string{"X-Codellm-Worker-Id": w.id}
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, pin); r.status != 503 || !bytes.Contains(r.body, []byte("worker_unavailable")) {
		t.Fatalf("pinned to an unready worker: %d %s", r.status, r.body)
	}
	wantCode(t, w.send(context.Background(), bridge.PathReady(w.id), bridge.ReadyRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, RegistrationGeneration: rr.RegistrationGeneration + 1}), 409, bridge.CodeWorkerFenced)
	if r := w.send(context.Background(), bridge.PathReady(w.id), bridge.ReadyRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, RegistrationGeneration: rr.RegistrationGeneration}); r.status != 200 || string(r.body) != `{"protocolVersion":1,"ready":true}` {
		t.Fatalf("ready: %d %s", r.status, r.body)
	}
	resp = asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"x"}`, pin)
	d := w.mustLease()
	w.ack(d)
	w.settle(d, runnerReply(d, w.incarnation))
	if r := recv(t, resp); r.status != 200 {
		t.Fatalf("after ready: %d %s", r.status, r.body)
	}
}

// §13.3: a bound worker serves only its tenant's matching principals; with
// dynamic workers a binding is mandatory.
func TestBindings(t *testing.T) {
	keys := []ClientKey{
		{Key: "k-u42", TenantID: "acme", UserID: "u-42"},
		{Key: "k-u7", TenantID: "acme", UserID: "u-7"},
		{Key: "k-other", TenantID: "globex", UserID: "u-42"},
	}
	// A caller no registered worker admits waits the queue timeout (an admitting worker may register).
	h := newTestHub(t, func(c *Config) { c.ClientKeys = keys; c.DynamicWorkers = true; c.QueueTimeout = 200 * time.Millisecond })
	w := newWorker(t, h, "bound-vm")
	wantCode(t, h.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: w.id}), 400, "")
	r := h.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: w.id, Binding: &bridge.Binding{TenantID: "acme", Principal: bridge.Principal{Type: "user", ID: "u-42"}}})
	var pr bridge.CreatePairingResponse
	_ = json.Unmarshal(r.body, &pr)
	r = w.redeem(pr.Code, w.pubPEM)
	var cr bridge.CredentialResponse
	_ = json.Unmarshal(r.body, &cr)
	w.credential = cr.Credential
	w.mustRegister()
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, w.incarnation) })
	defer stop()
	for key, want := range map[string]int{"k-u42": 200, "k-u7": 503, "k-other": 503} {
		if r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, map[string]string{"X-API-Key": key}); r.status != want {
			t.Errorf("%s: %d %s", key, r.status, r.body)
		}
	}
	// Pinning the bound worker as another principal is refused, not an outage.
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, map[string]string{"X-API-Key": "k-u7", "X-Codellm-Worker-Id": w.id}); r.status != 403 {
		t.Errorf("pinned foreign worker: %d %s", r.status, r.body)
	}
}
