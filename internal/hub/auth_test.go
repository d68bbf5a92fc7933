package hub

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
)

func wantCode(t *testing.T, r reply, status int, code bridge.Code) {
	t.Helper()
	if r.status != status || r.code() != code {
		t.Fatalf("got %d %s, want %d %q", r.status, r.body, status, code)
	}
}

// E1–E3: pairing, consumed codes, burned codes, non-Ed25519 keys.
func TestPairing(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "my:vm")
	r := h.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: w.id})
	if r.status != 200 {
		t.Fatalf("A1: %d %s", r.status, r.body)
	}
	var pr bridge.CreatePairingResponse
	_ = json.Unmarshal(r.body, &pr)
	if len(pr.Code) != 32 || pr.ProtocolVersion != 1 || pr.WorkerID != w.id {
		t.Fatalf("A1 reply %s", r.body)
	}
	r = w.redeem(pr.Code, w.pubPEM)
	if r.status != 200 {
		t.Fatalf("redeem: %d %s", r.status, r.body)
	}
	var cr bridge.CredentialResponse
	_ = json.Unmarshal(r.body, &cr)
	if len(cr.Credential) != 43 || cr.WorkerID != w.id {
		t.Fatalf("credential reply %s", r.body)
	}
	if exp, err := bridge.ParseTime(cr.ExpiresAt); err != nil || time.Until(exp) < 4*time.Minute {
		t.Fatalf("expiresAt %q", cr.ExpiresAt)
	}
	wantCode(t, w.redeem(pr.Code, w.pubPEM), 401, bridge.CodePairingInvalid)

	// E2: a code redeemed for another worker ID is burned.
	r = h.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: w.id})
	_ = json.Unmarshal(r.body, &pr)
	other := newWorker(t, h, "other-vm")
	wantCode(t, other.redeem(pr.Code, other.pubPEM), 401, bridge.CodePairingInvalid)
	wantCode(t, w.redeem(pr.Code, w.pubPEM), 401, bridge.CodePairingInvalid)

	// E3: an RSA key is refused and burns the code.
	rk, _ := rsa.GenerateKey(rand.Reader, 1024)
	der, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	rsaPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	r = h.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: w.id})
	_ = json.Unmarshal(r.body, &pr)
	wantCode(t, w.redeem(pr.Code, rsaPEM), 400, bridge.CodePublicKeyInvalid)
	wantCode(t, w.redeem(pr.Code, w.pubPEM), 401, bridge.CodePairingInvalid)

	// Validation: short code, bad worker ID, unknown code.
	wantCode(t, w.redeem("short", w.pubPEM), 400, "")
	wantCode(t, newWorker(t, h, "-bad").redeem(pr.Code, w.pubPEM), 400, "")
	wantCode(t, w.redeem(strings.Repeat("x", 32), w.pubPEM), 401, bridge.CodePairingInvalid)

	// Admin auth: wrong token 401; bad binding 400.
	req, _ := http.NewRequest(http.MethodPost, h.base+"/bridge/pairings", strings.NewReader(`{"workerId":"a"}`))
	req.Header.Set("Authorization", "Bearer wrong")
	wantCode(t, doHTTP(t, req), 401, "")
	wantCode(t, h.admin(t, http.MethodPost, "/bridge/pairings", map[string]any{"workerId": "a", "binding": map[string]any{"tenantId": "t", "principal": map[string]any{"type": "nobody", "id": "x"}}}), 400, "")
}

func TestAdminNotConfiguredAndStaticMode(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.AdminToken = "" })
	wantCode(t, h.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: "a"}), 503, "")

	s := newTestHub(t, func(c *Config) { c.AuthMode = AuthStatic })
	wantCode(t, s.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: "a"}), 409, "")
	w := newWorker(t, s, "static-vm")
	wantCode(t, w.redeem(strings.Repeat("c", 32), w.pubPEM), 409, "")
	// Static workers authenticate with the bearer token (default: admin token).
	b, _ := bridge.Marshal(bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: w.id, IncarnationID: w.incarnation, Capabilities: w.caps})
	send := func(path, tok string, body []byte) reply {
		req, _ := http.NewRequest(http.MethodPost, s.base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "bearer  "+tok+" ")
		return doHTTP(t, req)
	}
	if r := send(bridge.PathRegister(), adminToken, b); r.status != 200 {
		t.Fatalf("static register: %d %s", r.status, r.body)
	}
	wantCode(t, send(bridge.PathRegister(), "wrong", b), 401, "")
	wantCode(t, send(bridge.PathRefresh(w.id), adminToken, []byte(`{"protocolVersion":1}`)), 401, bridge.CodeCredentialInvalid)
}

// Forged signatures, replayed nonces, skewed clocks, re-escaped bodies and
// stale credentials are each refused with their code (§4.2, E5–E9).
func TestWorkerAuthentication(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "my:vm")
	w.pair(h)
	w.mustRegister()
	ctx := context.Background()
	lease := func() reply {
		ms := 0.0
		return w.send(ctx, bridge.PathLease(w.id), bridge.LeaseRequest{ProtocolVersion: 1, WaitMs: &ms, IncarnationID: w.incarnation})
	}
	if r := lease(); r.status != 200 || string(r.body) == "" || bytes.Contains(r.body, []byte("assignment")) {
		t.Fatalf("empty lease: %d %s", r.status, r.body)
	}

	// Missing proof headers: 401 without a code.
	req, _ := http.NewRequest(http.MethodPost, h.base+bridge.PathLease(w.id), strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bridge "+w.credential)
	wantCode(t, doHTTP(t, req), 401, "")

	// Forged signature: a different key signs.
	real := w.priv
	_, w.priv, _ = bridge.GenerateKey()
	wantCode(t, lease(), 401, bridge.CodeProofInvalid)
	w.priv = real

	// Replayed nonce.
	w.nonce = bridge.NewID()
	if r := lease(); r.status != 200 {
		t.Fatalf("first use of nonce: %d %s", r.status, r.body)
	}
	wantCode(t, lease(), 401, bridge.CodeProofReplayed)
	w.nonce = ""

	// Clock skew beyond 60 s either way; 50 s is fine.
	for _, off := range []time.Duration{-61 * time.Second, 61 * time.Second} {
		w.timestamp = func() time.Time { return time.Now().Add(off) }
		wantCode(t, lease(), 401, bridge.CodeProofInvalid)
	}
	w.timestamp = func() time.Time { return time.Now().Add(50 * time.Second) } // earlier than the store opening would read as a pre-restart replay
	if r := lease(); r.status != 200 {
		t.Fatalf("50 s skew refused: %d %s", r.status, r.body)
	}
	w.timestamp = nil

	// E7: body with \u003c escapes signed over the raw bytes, not the
	// canonical form the hub recomputes.
	raw := []byte(`{"protocolVersion":1,"waitMs":0,"incarnationId":"` + w.incarnation + `","x":"\u003c"}`)
	wantCode(t, w.send(ctx, bridge.PathLease(w.id), raw), 401, bridge.CodeProofInvalid)
	// The same body is fine when it is already canonical.
	canon, _ := bridge.Canonicalize(raw)
	if r := w.send(ctx, bridge.PathLease(w.id), canon); r.status != 200 {
		t.Fatalf("canonical body refused: %d %s", r.status, r.body)
	}

	// The hub accepts raw ':' and lowercase %3a in the path.
	for _, p := range []string{"/bridge/workers/my:vm/lease", "/bridge/workers/my%3avm/lease"} {
		if r := w.send(ctx, p, canon); r.status != 200 {
			t.Fatalf("%s: %d %s", p, r.status, r.body)
		}
	}

	// E8: rotation kills the old credential at once.
	old := w.credential
	r := w.send(ctx, bridge.PathRefresh(w.id), bridge.RefreshRequest{ProtocolVersion: 1})
	if r.status != 200 {
		t.Fatalf("refresh: %d %s", r.status, r.body)
	}
	var cr bridge.CredentialResponse
	_ = json.Unmarshal(r.body, &cr)
	w.credential = old
	wantCode(t, lease(), 401, bridge.CodeCredentialInvalid)
	w.credential = cr.Credential
	if r := lease(); r.status != 200 {
		t.Fatalf("new credential refused: %d %s", r.status, r.body)
	}

	// Validation after authentication: bad version, bad waitMs.
	wantCode(t, w.send(ctx, bridge.PathLease(w.id), []byte(`{"protocolVersion":2,"incarnationId":"`+w.incarnation+`"}`)), 400, "")
	wantCode(t, w.send(ctx, bridge.PathLease(w.id), []byte(`{"protocolVersion":1,"waitMs":-5,"incarnationId":"`+w.incarnation+`"}`)), 400, "")
	wantCode(t, w.send(ctx, bridge.PathLease(w.id), []byte("{\"protocolVersion\":1,\"x\":\"\xff\"}")), 400, "")

	// Body over the control-route limit: 413 before parsing.
	big := []byte(`{"protocolVersion":1,"pad":"` + strings.Repeat("a", 1<<20) + `"}`)
	wantCode(t, w.send(ctx, bridge.PathLease(w.id), big), 413, bridge.CodeBodyTooLarge)

	// E9: revoke while idle; the next call fails with CREDENTIAL_INVALID — a lease and a registration too,
	// whose signatures the hub checks with the credential it cached (the store confirms it).
	if r := h.admin(t, http.MethodPost, bridge.PathRevoke(w.id), nil); r.status != 200 || !bytes.Contains(r.body, []byte(`"revoked":true`)) {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	wantCode(t, lease(), 401, bridge.CodeCredentialInvalid)
	if r, _ := w.register(); r.status != 401 || r.code() != bridge.CodeCredentialInvalid {
		t.Fatalf("registration after the revoke: %d %s", r.status, r.body)
	}
}

// A worker whose credential was revoked while an assignment was in flight can neither acknowledge nor
// settle it with the credential the hub cached (the store confirms the credential in the operation's
// own transaction): 401 CREDENTIAL_INVALID, and the client is not answered with the refused result.
func TestRevokedMidAssignment(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "rv:vm")
	w.pair(h)
	w.mustRegister()
	done := make(chan reply, 1)
	go func() {
		done <- h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, map[string]string{"X-Codellm-Timeout-Ms": "1500"})
	}()
	a := w.mustLease()
	if r := h.admin(t, http.MethodPost, bridge.PathRevoke(w.id), nil); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := w.ack(a); r.status != 401 || r.code() != bridge.CodeCredentialInvalid {
		t.Fatalf("ack after the revoke: %d %s", r.status, r.body)
	}
	if r := w.settle(a, runnerReply(a, w.incarnation)); r.status != 401 || r.code() != bridge.CodeCredentialInvalid {
		t.Fatalf("settle after the revoke: %d %s", r.status, r.body)
	}
	if r := <-done; r.status == 200 {
		t.Fatalf("the client got the refused settlement: %d %s", r.status, r.body)
	}
}

func TestWorkerAllowList(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.WorkerIDs = []string{"allowed"} })
	r := h.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: "not-listed"})
	wantCode(t, r, 400, "")
	w := newWorker(t, h, "allowed")
	w.pair(h)
	w.mustRegister()
}

// Registration validation and negotiation against the real hub (E25, E26).
func TestRegistrationNegotiation(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "neg-vm")
	w.pair(h)
	all := []string{"read_file", "search_text", "list_files", "write_file", "preview_edit", "edit_file", "execute_command"}
	want := bridge.Capabilities{SandboxProfile: "codellm-embedded", Runtimes: []string{"python"}, WorkspaceTools: &bridge.WorkspaceTools{
		ProtocolVersion: 1, Operations: all, Workspaces: []bridge.Workspace{{ID: "primary", Name: "project", Operations: all}},
		WriteFileModes: []string{"replace", "create"}, EditFileModes: []string{"single", "batch"},
		EditFileFeatures: []string{"expected_base_sha256"}, ListFileFeatures: []string{"after_path"},
	}}
	// Phase 1: the compatible set.
	w.caps = bridge.CompatibleCapabilities(want)
	r, rr := w.register()
	if r.status != 200 {
		t.Fatalf("compatible register: %d %s", r.status, r.body)
	}
	if rr.IncarnationID != w.incarnation || rr.RegistrationGeneration < 1 || rr.LeaseTTLMs != 60000 {
		t.Fatalf("register reply %s", r.body)
	}
	wantReply := `"supportedWorkspaceToolOperations":["read_file","search_text","list_files","write_file","preview_edit","edit_file","execute_command"],"supportedWorkspaceWriteFileModes":["replace","create"],"supportedWorkspaceEditFileModes":["single","batch"],"supportedWorkspaceEditFileFeatures":["expected_base_sha256"],"supportedWorkspaceListFileFeatures":["after_path"]}`
	if !strings.HasSuffix(string(r.body), wantReply) {
		t.Fatalf("supported lists: %s", r.body)
	}
	// Phase 2: the negotiated set is the full set, and the hub accepts it.
	w.caps = bridge.NegotiateCapabilities(want, rr)
	if len(w.caps.WorkspaceTools.Operations) != 7 {
		t.Fatalf("negotiated %+v", w.caps.WorkspaceTools)
	}
	w.mustRegister()
	// The status route reports the registered capabilities verbatim.
	st := h.admin(t, http.MethodGet, bridge.PathStatus(w.id), nil)
	capsJSON, _ := bridge.Marshal(w.caps)
	if st.status != 200 || !bytes.Contains(st.body, []byte(`"online":true,"ready":true,"leaseExpiresInMs":`)) || !bytes.HasSuffix(st.body, append(append([]byte(`"capabilities":`), capsJSON...), '}')) {
		t.Fatalf("status: %d %s", st.status, st.body)
	}
	// A richer registration the hub refuses (unknown workspace key) is a
	// 400; the worker falls back to the compatible set (E26).
	raw := []byte(`{"protocolVersion":1,"workerId":"neg-vm","incarnationId":"` + w.incarnation + `","capabilities":{"statefulWorkspace":false,"sandboxProfile":"x","runtimes":[],"workspaceTools":{"protocolVersion":1,"operations":["read_file"],"workspaces":[{"id":"primary","name":"p","slots":2}]}}}`)
	wantCode(t, w.send(context.Background(), bridge.PathRegister(), raw), 400, "")
	w.caps = bridge.CompatibleCapabilities(want)
	w.mustRegister()
	// Offline status.
	st = h.admin(t, http.MethodGet, bridge.PathStatus("never-seen"), nil)
	if string(st.body) != `{"protocolVersion":1,"workerId":"never-seen","online":false,"ready":false}` {
		t.Fatalf("offline status %s", st.body)
	}
}

// CODELLM_HUB_SIGNED_PATH_PREFIX restores a prefix a reverse proxy stripped.
func TestSignedPathPrefix(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.SignedPathPrefix = "/code" })
	w := newWorker(t, h, "proxied")
	w.pair(h)
	r, _ := w.register()
	wantCode(t, r, 401, bridge.CodeProofInvalid) // signed without the prefix
	w.signPrefix = "/code"
	w.mustRegister()
}

// Settlements may exceed the 1 MiB control-route limit, up to MaxSettleBody.
func TestSettleBodyLimit(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.MaxSettleBody = 3 << 20 })
	w := newWorker(t, h, "big-vm")
	w.pair(h)
	w.mustRegister()
	resp := asyncClient(t, h, "/v1/exec", `{"lang":"py","code":"x"}`, nil)
	a := w.mustLease()
	w.ack(a)
	big := strings.Repeat("x", 2<<20)
	wantCode(t, w.settle(a, fulfilled(a, w.incarnation, `{"run":{"stdout":"`+big+big+`"}}`)), 413, bridge.CodeBodyTooLarge)
	if r := w.settle(a, fulfilled(a, w.incarnation, `{"run":{"stdout":"`+big+`","stderr":""}}`)); r.status != 200 {
		t.Fatalf("2 MiB settle: %d %.200s", r.status, r.body)
	}
	if r := recv(t, resp); r.status != 200 || len(r.body) < 2<<20 {
		t.Fatalf("client: %d, %d bytes", r.status, len(r.body))
	}
}

// Bare 403 for an unconfigured worker (static mode lets it authenticate) and
// WORKER_OFFLINE from ready once the registration has expired.
func TestNotConfiguredAndOffline(t *testing.T) {
	s := newTestHub(t, func(c *Config) { c.AuthMode = AuthStatic; c.WorkerIDs = []string{"listed"} })
	b, _ := bridge.Marshal(bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: "unlisted", IncarnationID: bridge.NewID(),
		Capabilities: bridge.Capabilities{SandboxProfile: "p", Runtimes: []string{}}})
	req, _ := http.NewRequest(http.MethodPost, s.base+bridge.PathRegister(), bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	wantCode(t, doHTTP(t, req), 403, "")

	h := newTestHub(t, nil, boltstore.WithLeaseTTL(200*time.Millisecond))
	w := newWorker(t, h, "offline-vm")
	w.caps.RequiresReadyConfirmation = true
	w.pair(h)
	rr := w.mustRegister()
	time.Sleep(300 * time.Millisecond)
	wantCode(t, w.send(context.Background(), bridge.PathReady(w.id), bridge.ReadyRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, RegistrationGeneration: rr.RegistrationGeneration}), 409, bridge.CodeWorkerOffline)
}
