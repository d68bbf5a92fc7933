// Package storetest is the conformance suite every hub store backend must
// pass (spec §7.4): the embedded bbolt store (internal/hub/boltstore) and
// the Redis store (internal/hub/redisstore) run the same Run with their own
// factories, so their behaviour cannot drift apart.
package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// Config is what the suite asks of a fresh store. TTLs are short and real.
type Config struct {
	LeaseTTL time.Duration
	Grace    time.Duration
}

// Factory opens a fresh, empty store; the suite closes it.
type Factory func(t *testing.T, cfg Config) store.Store

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore Factory) {
	t.Run("Pairing", func(t *testing.T) { testPairing(t, newStore) })
	t.Run("CredentialRefresh", func(t *testing.T) { testRefresh(t, newStore) })
	t.Run("CredentialConfirmedInOperations", func(t *testing.T) { testConfirm(t, newStore) })
	t.Run("Nonce", func(t *testing.T) { testNonce(t, newStore) })
	t.Run("RegistrationFencing", func(t *testing.T) { testFencing(t, newStore) })
	t.Run("ReadyConfirmation", func(t *testing.T) { testReady(t, newStore) })
	t.Run("AssignmentLifecycle", func(t *testing.T) { testLifecycle(t, newStore) })
	t.Run("SettlementChecks", func(t *testing.T) { testSettleChecks(t, newStore) })
	t.Run("Expiry", func(t *testing.T) { testExpiry(t, newStore) })
	t.Run("StatefulFence", func(t *testing.T) { testStatefulFence(t, newStore) })
	t.Run("WithdrawAndRegistrationExpiry", func(t *testing.T) { testWithdraw(t, newStore) })
	t.Run("SettleFreesWorker", func(t *testing.T) { testSettleFrees(t, newStore) })
	t.Run("AbandonDeadDispatcher", func(t *testing.T) { testAbandon(t, newStore) })
	t.Run("AbandonOnLapsedWorker", func(t *testing.T) { testAbandonLapsed(t, newStore) })
	t.Run("SlotsAndPools", func(t *testing.T) { testSlotsAndPools(t, newStore) })
	t.Run("SpentClaims", func(t *testing.T) { testSpentClaims(t, newStore) })
	t.Run("Sessions", func(t *testing.T) { testSessions(t, newStore) })
}

var ctx = context.Background()

const (
	worker = "my:vm"
	incA   = "AAECAwQFBgcICQoLDA0ODxAR"
	incB   = "BBECAwQFBgcICQoLDA0ODxAR"
	token  = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8"
)

func open(t *testing.T, f Factory, lease, grace time.Duration) store.Store {
	t.Helper()
	s := f(t, Config{LeaseTTL: lease, Grace: grace})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func want(t *testing.T, err, target error) {
	t.Helper()
	if target == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, target) {
		t.Fatalf("got %v, want %v", err, target)
	}
}

// pair creates and redeems a code, returning the auth of the new identity.
func pair(t *testing.T, s store.Store, w string) store.Auth {
	t.Helper()
	code := bridge.HashSecret(bridge.NewPairingCode())
	want(t, s.CreatePairing(ctx, w, code, nil, time.Now().Add(time.Minute)), nil)
	cred := bridge.HashSecret(bridge.NewSecret())
	id, err := s.RedeemPairing(ctx, store.RedeemParams{WorkerID: w, CodeHash: code, PublicKey: "pk", PublicKeyValid: true,
		CredentialHash: cred, ExpiresAt: time.Now().Add(time.Minute)})
	want(t, err, nil)
	c, err := s.Credential(ctx, w, cred)
	want(t, err, nil)
	if c.IdentityID != id || c.PublicKey != "pk" {
		t.Fatalf("credential %+v", c)
	}
	return store.Auth{CredentialHash: cred, IdentityID: id, PairingGeneration: c.PairingGeneration}
}

func caps(stateful, ready bool) bridge.Capabilities {
	return bridge.Capabilities{StatefulWorkspace: stateful, SandboxProfile: "codellm-embedded", Runtimes: []string{"python"},
		RequiresReadyConfirmation: ready}
}

func register(t *testing.T, s store.Store, inc string, auth store.Auth, c bridge.Capabilities) (*store.Registration, error) {
	t.Helper()
	b, _ := bridge.Marshal(c)
	return s.Register(ctx, store.RegisterParams{WorkerID: worker, IncarnationID: inc, Capabilities: c, CapabilitiesJSON: b, Auth: auth})
}

func enqueue(t *testing.T, s store.Store, id, sid string, d time.Duration) (*store.Assignment, error) {
	t.Helper()
	return s.Enqueue(ctx, store.EnqueueParams{WorkerID: worker, AssignmentID: id, LeaseTokenHash: bridge.HashSecret(token),
		ExpiresAt: time.Now().Add(d), RuntimeSessionID: sid, ExecutionKind: bridge.KindSandbox, Request: []byte(`{"body":{}}`)})
}

func settle(s store.Store, a *store.Assignment, auth store.Auth, status, body string) error {
	return s.Settle(ctx, store.SettleParams{WorkerID: a.WorkerID, AssignmentID: a.ID, IncarnationID: a.IncarnationID,
		Generation: a.Generation, LeaseTokenHash: bridge.HashSecret(token), IdentityID: auth.IdentityID, Status: status, Canonical: []byte(body)})
}

func ack(s store.Store, a *store.Assignment) error {
	return s.Ack(ctx, store.AckParams{WorkerID: a.WorkerID, AssignmentID: a.ID, IncarnationID: a.IncarnationID,
		Generation: a.Generation, LeaseTokenHash: bridge.HashSecret(token)})
}

func testPairing(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)

	// A consumed code is gone.
	code := bridge.HashSecret("consumed-code-000000")
	want(t, s.CreatePairing(ctx, worker, code, nil, time.Now().Add(time.Minute)), nil)
	rp := store.RedeemParams{WorkerID: worker, CodeHash: code, PublicKey: "pk2", PublicKeyValid: true,
		CredentialHash: bridge.HashSecret("c2"), ExpiresAt: time.Now().Add(time.Minute)}
	_, err := s.RedeemPairing(ctx, rp)
	want(t, err, nil)
	_, err = s.RedeemPairing(ctx, rp)
	want(t, err, bridge.ErrPairingInvalid)
	// Pairing again replaced the identity: the first credential died.
	_, err = s.Credential(ctx, worker, auth.CredentialHash)
	want(t, err, bridge.ErrCredentialInvalid)

	// A code redeemed for another worker ID is burned.
	code = bridge.HashSecret("burn-me-00000000000")
	want(t, s.CreatePairing(ctx, worker, code, nil, time.Now().Add(time.Minute)), nil)
	rp.CodeHash, rp.WorkerID = code, "other"
	_, err = s.RedeemPairing(ctx, rp)
	want(t, err, bridge.ErrPairingInvalid)
	rp.WorkerID = worker
	_, err = s.RedeemPairing(ctx, rp)
	want(t, err, bridge.ErrPairingInvalid)

	// An invalid key burns the code.
	code = bridge.HashSecret("bad-key-00000000000")
	want(t, s.CreatePairing(ctx, worker, code, nil, time.Now().Add(time.Minute)), nil)
	rp.CodeHash, rp.PublicKeyValid = code, false
	_, err = s.RedeemPairing(ctx, rp)
	want(t, err, bridge.ErrPublicKeyInvalid)
	rp.PublicKeyValid = true
	_, err = s.RedeemPairing(ctx, rp)
	want(t, err, bridge.ErrPairingInvalid)

	// A new code supersedes the old one; an expired code is dead.
	old, fresh := bridge.HashSecret("old-code-0000000000"), bridge.HashSecret("new-code-0000000000")
	want(t, s.CreatePairing(ctx, worker, old, nil, time.Now().Add(time.Minute)), nil)
	want(t, s.CreatePairing(ctx, worker, fresh, nil, time.Now().Add(50*time.Millisecond)), nil)
	rp.CodeHash = old
	_, err = s.RedeemPairing(ctx, rp)
	want(t, err, bridge.ErrPairingInvalid)
	time.Sleep(80 * time.Millisecond)
	rp.CodeHash = fresh
	_, err = s.RedeemPairing(ctx, rp)
	want(t, err, bridge.ErrPairingInvalid)

	// Revoke kills the credential and an unredeemed code.
	auth = pair(t, s, worker)
	code = bridge.HashSecret("pending-at-revoke00")
	want(t, s.CreatePairing(ctx, worker, code, nil, time.Now().Add(time.Minute)), nil)
	want(t, s.Revoke(ctx, worker), nil)
	_, err = s.Credential(ctx, worker, auth.CredentialHash)
	want(t, err, bridge.ErrCredentialInvalid)
	rp.CodeHash = code
	_, err = s.RedeemPairing(ctx, rp)
	want(t, err, bridge.ErrPairingInvalid)
	// A registration authenticated before the revoke (the hub may have checked a cached credential) fails
	// as a fresh lookup would: the credential is gone.
	_, err = register(t, s, incA, auth, caps(false, false))
	want(t, err, bridge.ErrCredentialInvalid)

	// Bindings travel from the code to the credential.
	b := &bridge.Binding{TenantID: "acme", Principal: bridge.Principal{Type: "user", ID: "u-42"}}
	code = bridge.HashSecret("bound-code-00000000")
	want(t, s.CreatePairing(ctx, "bound", code, b, time.Now().Add(time.Minute)), nil)
	_, err = s.RedeemPairing(ctx, store.RedeemParams{WorkerID: "bound", CodeHash: code, PublicKey: "pk", PublicKeyValid: true,
		CredentialHash: bridge.HashSecret("bc"), ExpiresAt: time.Now().Add(time.Minute)})
	want(t, err, nil)
	c, err := s.Credential(ctx, "bound", bridge.HashSecret("bc"))
	want(t, err, nil)
	if c.Binding == nil || *c.Binding != *b {
		t.Fatalf("binding %+v", c.Binding)
	}
}

func testRefresh(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	n := bridge.HashSecret("next")
	want(t, s.RefreshCredential(ctx, worker, auth.CredentialHash, n, time.Now().Add(time.Minute)), nil)
	_, err := s.Credential(ctx, worker, auth.CredentialHash)
	want(t, err, bridge.ErrCredentialInvalid)
	c, err := s.Credential(ctx, worker, n)
	want(t, err, nil)
	if c.IdentityID != auth.IdentityID {
		t.Fatal("refresh changed the identity")
	}
	want(t, s.RefreshCredential(ctx, worker, auth.CredentialHash, bridge.HashSecret("x"), time.Now().Add(time.Minute)), bridge.ErrCredentialInvalid)
	// An expired credential can neither authenticate nor refresh.
	short := bridge.HashSecret("short")
	want(t, s.RefreshCredential(ctx, worker, n, short, time.Now().Add(30*time.Millisecond)), nil)
	time.Sleep(50 * time.Millisecond)
	_, err = s.Credential(ctx, worker, short)
	want(t, err, bridge.ErrCredentialInvalid)
	want(t, s.RefreshCredential(ctx, worker, short, bridge.HashSecret("y"), time.Now().Add(time.Minute)), bridge.ErrCredentialInvalid)
}

// testConfirm: lease, ack, settle and registration confirm the request's credential on the worker record
// their own transaction reads, because the hub verifies those requests' signatures with credentials it
// cached. After a rotation, each call with the old credential fails CREDENTIAL_INVALID and changes
// nothing; the same calls without the confirmation (the zero Auth, which has nothing to confirm) go
// through — what a cached credential would get without it.
func testConfirm(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	old := pair(t, s, worker)
	_, err := register(t, s, incA, old, caps(false, false))
	want(t, err, nil)
	a, err := enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, nil)
	fresh := old
	fresh.CredentialHash = bridge.HashSecret("rotated")
	want(t, s.RefreshCredential(ctx, worker, old.CredentialHash, fresh.CredentialHash, time.Now().Add(time.Minute)), nil)
	var unconfirmed store.Auth

	lease := func(auth store.Auth, woken bool) (*store.Assignment, error) {
		return s.LeaseSlot(ctx, store.LeaseParams{WorkerID: worker, IncarnationID: incA, IdentityID: old.IdentityID, Auth: auth, Slot: -1, Woken: woken})
	}
	for _, woken := range []bool{false, true} { // the one-read empty check, and the transaction
		l, err := lease(old, woken)
		want(t, err, bridge.ErrCredentialInvalid)
		if l != nil {
			t.Fatalf("leased with a rotated credential: %+v", l)
		}
	}
	if l, err := lease(unconfirmed, false); err != nil || l == nil || l.ID != a.ID {
		t.Fatalf("lease without confirmation: %+v %v", l, err)
	}
	ackWith := func(auth store.Auth) error {
		return s.Ack(ctx, store.AckParams{Auth: auth, WorkerID: worker, AssignmentID: a.ID, IncarnationID: incA, Generation: a.Generation,
			LeaseTokenHash: bridge.HashSecret(token)})
	}
	want(t, ackWith(old), bridge.ErrCredentialInvalid)
	want(t, ackWith(unconfirmed), nil)
	settleWith := func(auth store.Auth) error {
		return s.Settle(ctx, store.SettleParams{Auth: auth, WorkerID: worker, AssignmentID: a.ID, IncarnationID: incA, Generation: a.Generation,
			LeaseTokenHash: bridge.HashSecret(token), IdentityID: old.IdentityID, Status: bridge.StatusFulfilled, Canonical: []byte(`{"x":1}`)})
	}
	want(t, settleWith(old), bridge.ErrCredentialInvalid)
	if st, err := s.Settlement(ctx, worker, a.ID); err != nil || st != nil {
		t.Fatalf("a refused settlement was stored: %+v %v", st, err)
	}
	want(t, settleWith(unconfirmed), nil)
	_, err = register(t, s, incA, old, caps(false, false))
	want(t, err, bridge.ErrCredentialInvalid)
	_, err = register(t, s, incA, fresh, caps(false, false))
	want(t, err, nil)
}

func testNonce(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	now := time.Now().Add(time.Second)
	want(t, s.UseNonce(ctx, "c", "n1", now), nil)
	want(t, s.UseNonce(ctx, "c", "n1", now), bridge.ErrProofReplayed)
	want(t, s.UseNonce(ctx, "c2", "n1", now), nil) // scoped by credential
	want(t, s.UseNonce(ctx, "c", "n2", now), nil)
}

func testFencing(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	ra, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)
	ra2, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)
	if ra2.Generation != ra.Generation || ra.Generation < 1 {
		t.Fatalf("heartbeat changed generation %d → %d", ra.Generation, ra2.Generation)
	}
	// B takes over while A is idle: A is fenced for good.
	rb, err := register(t, s, incB, auth, caps(false, false))
	want(t, err, nil)
	if rb.Generation != ra.Generation+1 {
		t.Fatalf("generation %d after %d", rb.Generation, ra.Generation)
	}
	_, err = register(t, s, incA, auth, caps(false, false))
	want(t, err, bridge.ErrWorkerFenced)
	_, err = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, err, bridge.ErrWorkerFenced)
	want(t, s.ResetWorkspace(ctx, worker, incA, "sess"), bridge.ErrWorkerFenced)

	// While B holds an assignment, a third incarnation is refused as busy.
	a, err := enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, nil)
	const incC = "CCECAwQFBgcICQoLDA0ODxAR"
	_, err = register(t, s, incC, auth, caps(false, false))
	want(t, err, bridge.ErrWorkerBusy)
	got, err := s.Lease(ctx, worker, incB, auth.IdentityID)
	want(t, err, nil)
	want(t, ack(s, got), nil)
	want(t, settle(s, a, auth, bridge.StatusRejected, `{"r":1}`), nil)
	_, err = s.Complete(ctx, worker, a.ID)
	want(t, err, nil)
	_, err = register(t, s, incC, auth, caps(false, false))
	want(t, err, nil)

	// Another identity of the same worker ID cannot register on a stale auth.
	stale := auth
	stale.IdentityID = "someone-else"
	_, err = register(t, s, incC, stale, caps(false, false))
	want(t, err, bridge.ErrWorkerUnauthorized)
}

func testReady(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	r, err := register(t, s, incA, auth, caps(false, true))
	want(t, err, nil)
	st, _ := s.Worker(ctx, worker)
	if !st.Online || st.Ready {
		t.Fatalf("before ready: %+v", st)
	}
	_, err = enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, bridge.ErrWorkerOffline)
	want(t, s.Ready(ctx, worker, incA, r.Generation+1), bridge.ErrWorkerFenced)
	want(t, s.Ready(ctx, worker, incB, r.Generation), bridge.ErrWorkerFenced)
	want(t, s.Ready(ctx, worker, incA, r.Generation), nil)
	st, _ = s.Worker(ctx, worker)
	if !st.Ready {
		t.Fatalf("after ready: %+v", st)
	}
	// A new incarnation clears readiness.
	_, err = register(t, s, incB, auth, caps(false, true))
	want(t, err, nil)
	st, _ = s.Worker(ctx, worker)
	if st.Ready {
		t.Fatal("readiness survived a generation change")
	}
	want(t, s.Ready(ctx, "nobody", incA, 1), bridge.ErrWorkerOffline)
}

func testLifecycle(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)
	none, err := s.Lease(ctx, worker, incA, auth.IdentityID)
	if err != nil || none != nil {
		t.Fatalf("empty lease: %v %v", none, err)
	}
	a, err := enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, nil)
	if a.IncarnationID != incA || a.Generation < 1 {
		t.Fatalf("assignment %+v", a)
	}
	_, err = enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, bridge.ErrWorkerBusy)
	st, _ := s.Worker(ctx, worker)
	if !st.Busy {
		t.Fatal("lock not visible")
	}
	l1, err := s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, err, nil)
	// A lost reply: the next lease redelivers the same claim.
	l2, err := s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, err, nil)
	if l1 == nil || l2 == nil || l1.ID != a.ID || l2.ID != a.ID || string(l1.Request) != `{"body":{}}` {
		t.Fatalf("lease %+v %+v", l1, l2)
	}
	bad := *a
	bad.Generation++
	want(t, ack(s, &bad), bridge.ErrAssignmentFenced)
	want(t, ack(s, a), nil)
	if c, _ := s.Cancelled(ctx, worker, incA, a.ID); c {
		t.Fatal("cancelled before Cancel")
	}
	if c, _ := s.Cancelled(ctx, worker, incB, a.ID); !c {
		t.Fatal("another incarnation must read cancelled")
	}
	if c, _ := s.Cancelled(ctx, worker, incA, "unknown-assignment-id0"); !c {
		t.Fatal("unknown assignment must read cancelled")
	}
	if got, _ := s.Settlement(ctx, worker, a.ID); got != nil {
		t.Fatal("settlement before settle")
	}
	// Collect before the settlement changes nothing: the worker settles as if it had not been called.
	if got, err := s.Collect(ctx, worker, a.ID); got != nil || err != nil {
		t.Fatalf("collect before settle: %v %v", got, err)
	}
	body := `{"protocolVersion":1,"status":"fulfilled","result":{"x":1}}`
	want(t, settle(s, a, auth, bridge.StatusFulfilled, body), nil)
	want(t, settle(s, a, auth, bridge.StatusFulfilled, body), nil) // idempotent
	want(t, settle(s, a, auth, bridge.StatusFulfilled, body+" "), bridge.ErrAssignmentFenced)
	got, err := s.Settlement(ctx, worker, a.ID)
	if err != nil || got == nil || string(got.Canonical) != body {
		t.Fatalf("settlement %v %v", got, err)
	}
	for _, collect := range []func(context.Context, string, string) (*store.Settlement, error){s.Collect, s.Complete, s.Collect} {
		fin, err := collect(ctx, worker, a.ID)
		if err != nil || fin == nil || string(fin.Canonical) != body {
			t.Fatalf("collect/complete %v %v", fin, err)
		}
	}
	// After completion the duplicate is still idempotent; the lock is free.
	want(t, settle(s, a, auth, bridge.StatusFulfilled, body), nil)
	st, _ = s.Worker(ctx, worker)
	if st.Busy {
		t.Fatal("lock held after completion")
	}
	// Cancel marks an assignment for the worker's poll.
	b, err := enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, nil)
	want(t, s.Cancel(ctx, worker, b.ID), nil)
	if c, _ := s.Cancelled(ctx, worker, incA, b.ID); !c {
		t.Fatal("cancel mark not visible")
	}
	if b.Generation != a.Generation+1 {
		t.Fatalf("generation %d after %d", b.Generation, a.Generation)
	}
}

func testSettleChecks(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)
	a, err := enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, nil)
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, a), nil)
	p := store.SettleParams{WorkerID: worker, AssignmentID: a.ID, IncarnationID: incA, Generation: a.Generation,
		LeaseTokenHash: bridge.HashSecret(token), IdentityID: auth.IdentityID, Status: bridge.StatusRejected, Canonical: []byte(`{}`)}
	q := p
	q.LeaseTokenHash = bridge.HashSecret("wrong")
	want(t, s.Settle(ctx, q), bridge.ErrAssignmentFenced)
	q = p
	q.Generation--
	want(t, s.Settle(ctx, q), bridge.ErrAssignmentFenced)
	q = p
	q.IncarnationID = incB
	want(t, s.Settle(ctx, q), bridge.ErrAssignmentFenced)
	q = p
	q.IdentityID = "other-identity"
	want(t, s.Settle(ctx, q), bridge.ErrAssignmentFenced)
	q = p
	q.WorkerID = "other"
	want(t, s.Settle(ctx, q), bridge.ErrWorkerMismatch)
	q = p
	q.AssignmentID = "ZZZZZZZZZZZZZZZZZZZZZZZZ"
	want(t, s.Settle(ctx, q), bridge.ErrAssignmentNotFound)
	want(t, s.Settle(ctx, p), nil)
}

func testExpiry(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)

	// Fulfilled after the deadline: expired; rejected is still accepted.
	a, err := enqueue(t, s, bridge.NewID(), "", 300*time.Millisecond)
	want(t, err, nil)
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, a), nil)
	time.Sleep(350 * time.Millisecond)
	want(t, settle(s, a, auth, bridge.StatusFulfilled, `{"f":1}`), bridge.ErrAssignmentExpired)
	want(t, settle(s, a, auth, bridge.StatusRejected, `{"r":1}`), nil)
	fin, err := s.Complete(ctx, worker, a.ID)
	if err != nil || string(fin.Canonical) != `{"r":1}` {
		t.Fatalf("complete %v %v", fin, err)
	}

	// Never delivered: completion at the deadline frees the worker at once.
	b, err := enqueue(t, s, bridge.NewID(), "", 40*time.Millisecond)
	want(t, err, nil)
	time.Sleep(60 * time.Millisecond)
	if l, err := s.Lease(ctx, worker, incA, auth.IdentityID); err != nil || l != nil {
		t.Fatalf("expired assignment leased: %v %v", l, err)
	}
	_, err = s.Complete(ctx, worker, b.ID)
	want(t, err, bridge.ErrAssignmentExpired)
	st, _ := s.Worker(ctx, worker)
	if st.Busy {
		t.Fatal("lock kept for a never-delivered assignment")
	}

	// Acked but never settled: the lock stays until deadline + grace.
	c, err := enqueue(t, s, bridge.NewID(), "", 300*time.Millisecond)
	want(t, err, nil)
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, c), nil)
	time.Sleep(350 * time.Millisecond)
	_, err = s.Complete(ctx, worker, c.ID)
	want(t, err, bridge.ErrAssignmentExpired)
	if c, _ := s.Cancelled(ctx, worker, incA, c.ID); !c {
		t.Fatal("expired assignment not cancelled")
	}
	_, err = enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, bridge.ErrWorkerBusy)
	time.Sleep(1050 * time.Millisecond)
	_, err = enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, nil)
	// Records are gone after the grace period.
	want(t, settle(s, c, auth, bridge.StatusRejected, `{}`), bridge.ErrAssignmentNotFound)
}

func testStatefulFence(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)
	_, err = enqueue(t, s, bridge.NewID(), "sess-1", time.Minute)
	want(t, err, bridge.ErrWorkerMismatch)
	_, err = register(t, s, incA, auth, caps(true, false))
	want(t, err, nil)

	// A fulfilled stateful assignment commits: the fence is cleared.
	a, err := enqueue(t, s, bridge.NewID(), "sess-1", time.Minute)
	want(t, err, nil)
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, a), nil)
	// While it runs, another run of the session waits for it (busy), not for a reset (quarantined).
	_, err = enqueue(t, s, bridge.NewID(), "sess-1", time.Minute)
	want(t, err, bridge.ErrWorkerBusy)
	want(t, settle(s, a, auth, bridge.StatusFulfilled, `{"ok":1}`), nil)
	_, err = s.Complete(ctx, worker, a.ID)
	want(t, err, nil)

	// Expired after ack: fence kept, session quarantined, reset busy while locked.
	b, err := enqueue(t, s, bridge.NewID(), "sess-1", 300*time.Millisecond)
	want(t, err, nil)
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, b), nil)
	time.Sleep(350 * time.Millisecond)
	_, err = s.Complete(ctx, worker, b.ID)
	want(t, err, bridge.ErrAssignmentExpired)
	want(t, s.ResetWorkspace(ctx, worker, incA, "sess-1"), bridge.ErrWorkerBusy)
	_, err = enqueue(t, s, bridge.NewID(), "sess-1", time.Minute) // its lock still held, but the run is over
	want(t, err, bridge.ErrWorkspaceQuarantined)
	time.Sleep(1050 * time.Millisecond) // lock expires
	_, err = enqueue(t, s, bridge.NewID(), "sess-1", time.Minute)
	want(t, err, bridge.ErrWorkspaceQuarantined)
	_, err = enqueue(t, s, bridge.NewID(), "sess-2", 50*time.Millisecond) // other sessions are fine
	want(t, err, nil)
	time.Sleep(60 * time.Millisecond)
	want(t, s.ResetWorkspace(ctx, worker, incA, "sess-1"), bridge.ErrWorkerBusy)
	time.Sleep(1050 * time.Millisecond)
	want(t, s.ResetWorkspace(ctx, worker, incA, "sess-1"), nil)
	c, err := enqueue(t, s, bridge.NewID(), "sess-1", time.Minute)
	want(t, err, nil)

	// A rejected settlement clears the fence.
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, c), nil)
	want(t, settle(s, c, auth, bridge.StatusRejected, `{"r":1}`), nil)
	_, err = s.Complete(ctx, worker, c.ID)
	want(t, err, nil)
	_, err = enqueue(t, s, bridge.NewID(), "sess-1", time.Minute)
	want(t, err, nil)
}

func testWithdraw(t *testing.T, f Factory) {
	s := open(t, f, 500*time.Millisecond, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(true, false))
	want(t, err, nil)
	a, err := enqueue(t, s, bridge.NewID(), "sess-w", time.Minute)
	want(t, err, nil)
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID) // claimed, never acked
	// The worker crashes: its registration expires.
	time.Sleep(600 * time.Millisecond)
	st, _ := s.Worker(ctx, worker)
	if st.Online || st.Ready {
		t.Fatalf("crashed worker still online: %+v", st)
	}
	if ws, _ := s.Workers(ctx); len(ws) != 0 {
		t.Fatalf("workers %+v", ws)
	}
	want(t, s.Withdraw(ctx, worker, a.ID), nil)
	// The withdrawn assignment's fence and lock are gone.
	_, err = register(t, s, incA, auth, caps(true, false))
	want(t, err, nil)
	b, err := enqueue(t, s, bridge.NewID(), "sess-w", time.Minute)
	want(t, err, nil)
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, b), nil)
	want(t, s.Withdraw(ctx, worker, b.ID), bridge.ErrAssignmentFenced)
	want(t, s.Withdraw(ctx, worker, a.ID), bridge.ErrAssignmentNotFound)
}

// testSettleFrees: a stored settlement frees the worker and commits a stateful session at once, without
// waiting for its dispatcher's Complete (a dispatcher that died must not strand either).
func testSettleFrees(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(true, false))
	want(t, err, nil)
	a, err := enqueue(t, s, bridge.NewID(), "sess-f", time.Minute)
	want(t, err, nil)
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, a), nil)
	want(t, settle(s, a, auth, bridge.StatusFulfilled, `{"ok":1}`), nil)
	if st, _ := s.Worker(ctx, worker); st.Busy {
		t.Fatal("the worker is still locked after its settlement was stored")
	}
	b, err := enqueue(t, s, bridge.NewID(), "sess-f", time.Minute)
	want(t, err, nil) // the session was committed by the settlement
	// The first dispatcher collects its result later, unchanged.
	fin, err := s.Complete(ctx, worker, a.ID)
	if err != nil || string(fin.Canonical) != `{"ok":1}` {
		t.Fatalf("complete after the next dispatch: %v %v", fin, err)
	}
	if st, _ := s.Worker(ctx, worker); !st.Busy {
		t.Fatal("completing the first assignment released the second one's lock")
	}
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, b), nil)
}

// testAbandon: the assignments a dead dispatcher waited for are ended by Abandon: never-acknowledged work
// is dropped (it never runs), acknowledged work is cancelled and keeps the worker until it settles,
// settled work is no longer on the list; other dispatchers' work is untouched.
func testAbandon(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)
	dispatchBy := func(d string) *store.Assignment {
		a, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: worker, AssignmentID: bridge.NewID(), LeaseTokenHash: bridge.HashSecret(token),
			ExpiresAt: time.Now().Add(time.Minute), ExecutionKind: bridge.KindSandbox, Request: []byte(`{}`), Dispatcher: d})
		want(t, err, nil)
		return a
	}
	abandon := func(d string, wantN int) {
		t.Helper()
		if n, err := s.Abandon(ctx, d); err != nil || n != wantN {
			t.Fatalf("abandon %s: %d %v, want %d", d, n, err, wantN)
		}
	}
	// Queued, never leased: dropped; the worker is free.
	a := dispatchBy("dead-1")
	abandon("live", 0)
	abandon("dead-1", 1)
	if l, err := s.Lease(ctx, worker, incA, auth.IdentityID); err != nil || l != nil {
		t.Fatalf("abandoned work was leased: %+v %v", l, err)
	}
	want(t, ack(s, a), bridge.ErrAssignmentFenced)
	// Acknowledged: cancelled, the worker stays busy until its settlement.
	b := dispatchBy("dead-2")
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, b), nil)
	abandon("dead-2", 1)
	abandon("dead-2", 0)
	if c, _ := s.Cancelled(ctx, worker, incA, b.ID); !c {
		t.Fatal("abandoned running work not cancelled")
	}
	if st, _ := s.Worker(ctx, worker); !st.Busy {
		t.Fatal("abandoned running work released the worker before settling")
	}
	want(t, settle(s, b, auth, bridge.StatusRejected, `{"r":1}`), nil)
	if st, _ := s.Worker(ctx, worker); st.Busy {
		t.Fatal("the late settlement did not free the worker")
	}
	// Settled, never collected: the settlement finished it and took it off its dispatcher's list, so
	// there is nothing left to abandon; the result stays collectable until the record expires.
	c := dispatchBy("dead-3")
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, c), nil)
	want(t, settle(s, c, auth, bridge.StatusFulfilled, `{"c":1}`), nil)
	abandon("dead-3", 0)
	if fin, err := s.Collect(ctx, worker, c.ID); err != nil || fin == nil || string(fin.Canonical) != `{"c":1}` {
		t.Fatalf("collect after the dispatcher died: %v %v", fin, err)
	}
}

// testAbandonLapsed: a dead dispatcher's work on a worker whose registration lapsed is still found by the
// sweep, after the worker index dropped the lapsed registrations it could: a worker that comes back is not
// kept busy by work nobody waits for.
func testAbandonLapsed(t *testing.T, f Factory) {
	s := open(t, f, 2*time.Second, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)
	_, err = s.Enqueue(ctx, store.EnqueueParams{WorkerID: worker, AssignmentID: bridge.NewID(), LeaseTokenHash: bridge.HashSecret(token),
		ExpiresAt: time.Now().Add(time.Minute), ExecutionKind: bridge.KindSandbox, Request: []byte(`{}`), Dispatcher: "dead"})
	want(t, err, nil)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ws, err := s.Workers(ctx) // prunes the index of lapsed registrations
		want(t, err, nil)
		if len(ws) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the registration never lapsed: %+v", ws)
		}
	}
	if n, err := s.Abandon(ctx, "dead"); err != nil || n != 1 {
		t.Fatalf("abandon after the registration lapsed: %d %v, want 1", n, err)
	}
	if st, _ := s.Worker(ctx, worker); st.Busy || st.Active != 0 {
		t.Fatalf("the swept work still holds the worker: %+v", st)
	}
}

// testSlotsAndPools: a worker granted K lease slots holds K assignments at once, each slot leasing (and on a
// lost reply re-leasing) its own; its pool lists it as online, and as idle exactly while it has a free
// slot, longest idle first; TakeIdle hands it out once.
func testSlotsAndPools(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	c := caps(false, false)
	b, _ := bridge.Marshal(c)
	reg, err := s.Register(ctx, store.RegisterParams{WorkerID: worker, IncarnationID: incA, Capabilities: c, CapabilitiesJSON: b, Auth: auth, Slots: 3})
	want(t, err, nil)
	if reg.Slots != 3 || reg.Pool == "" {
		t.Fatalf("registration %+v", reg)
	}
	pools, err := s.Pools(ctx)
	want(t, err, nil)
	if len(pools) != 1 || pools[0].ID != reg.Pool || !pools[0].Capabilities.HasRuntime("python") {
		t.Fatalf("pools %+v", pools)
	}
	if n, err := s.Online(ctx, reg.Pool); err != nil || n != 1 {
		t.Fatalf("online %d %v", n, err)
	}
	take := func(wantOK bool) {
		t.Helper()
		w, ok, err := s.TakeIdle(ctx, reg.Pool)
		if err != nil || ok != wantOK || (ok && w != worker) {
			t.Fatalf("take idle: %q %v %v, want %v", w, ok, err, wantOK)
		}
	}
	var as []*store.Assignment
	for range 3 {
		take(true)
		take(false) // taken: out of the idle set until its enqueue puts it back
		a, err := enqueue(t, s, bridge.NewID(), "", time.Minute)
		want(t, err, nil)
		as = append(as, a)
	}
	take(false) // every slot taken
	_, err = enqueue(t, s, bridge.NewID(), "", time.Minute)
	want(t, err, bridge.ErrWorkerBusy)
	if st, _ := s.Worker(ctx, worker); !st.Busy || st.Active != 3 {
		t.Fatalf("state %+v", st)
	}
	got := map[string]int{}
	for slot := range 3 {
		lp := store.LeaseParams{WorkerID: worker, IncarnationID: incA, IdentityID: auth.IdentityID, Slot: slot}
		l, err := s.LeaseSlot(ctx, lp)
		want(t, err, nil)
		lp.Woken = true
		again, err := s.LeaseSlot(ctx, lp) // a lost reply: the same one
		want(t, err, nil)
		if l == nil || again == nil || l.ID != again.ID || l.Slot != slot {
			t.Fatalf("slot %d: %+v / %+v", slot, l, again)
		}
		got[l.ID] = slot
		want(t, ack(s, l), nil)
	}
	if len(got) != 3 {
		t.Fatalf("slots leased %v", got)
	}
	if l, err := s.LeaseSlot(ctx, store.LeaseParams{WorkerID: worker, IncarnationID: incA, IdentityID: auth.IdentityID, Slot: 3, Woken: true}); err == nil && l != nil {
		t.Fatalf("a slot beyond the grant leased %+v", l)
	}
	want(t, settle(s, as[1], auth, bridge.StatusRejected, `{"r":1}`), nil)
	take(true) // a free slot again
	if st, _ := s.Worker(ctx, worker); st.Busy || st.Active != 2 {
		t.Fatalf("state after one settlement %+v", st)
	}
}

// testSpentClaims: dispatch hands work straight to a lease claim, and a settlement leaves that claim in
// place, spent: a lease after the settlement finds nothing (not the settled work again), an
// acknowledgement of the settled work is fenced, and the next dispatch reaches the same lease, with or
// without a wake-up. A slot lease of a registration granted no slots is refused (its work goes to the
// incarnation's own claim, which only a lease without a slot reads).
func testSpentClaims(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(false, false))
	want(t, err, nil)
	lease := func(woken bool, queued string) *store.Assignment {
		t.Helper()
		l, err := s.LeaseSlot(ctx, store.LeaseParams{WorkerID: worker, IncarnationID: incA, IdentityID: auth.IdentityID, Auth: auth,
			Slot: -1, Woken: woken, Queued: queued})
		want(t, err, nil)
		return l
	}
	for i, woken := range []bool{false, true, false} {
		a, err := enqueue(t, s, bridge.NewID(), "", time.Minute)
		want(t, err, nil)
		hint := ""
		if woken {
			hint = a.ID
		}
		if l := lease(woken, hint); l == nil || l.ID != a.ID {
			t.Fatalf("dispatch %d: leased %+v, want %s", i, l, a.ID)
		}
		want(t, ack(s, a), nil)
		want(t, settle(s, a, auth, bridge.StatusFulfilled, `{"ok":1}`), nil)
		if l := lease(false, ""); l != nil {
			t.Fatalf("dispatch %d: after its settlement the lease delivered %s again", i, l.ID)
		}
		if l := lease(true, a.ID); l != nil {
			t.Fatalf("dispatch %d: a late wake-up delivered %s again", i, l.ID)
		}
		want(t, ack(s, a), bridge.ErrAssignmentFenced)
	}
	_, err = s.LeaseSlot(ctx, store.LeaseParams{WorkerID: worker, IncarnationID: incA, IdentityID: auth.IdentityID, Auth: auth, Slot: 0})
	if be := (*bridge.Error)(nil); !errors.As(err, &be) || be.Code != bridge.CodeWorkerMismatch {
		t.Fatalf("a slot lease without a slot grant: %v, want WORKER_MISMATCH", err)
	}
}

// testSessions: an exec session's record — bound directly or with its assignment — names its tenant,
// worker and incarnation; a workspace reset clears the incarnation (the next run rebinds it).
func testSessions(t *testing.T, f Factory) {
	s := open(t, f, time.Minute, time.Second)
	if got, err := s.Session(ctx, "nobody"); err != nil || got != nil {
		t.Fatalf("unknown session: %+v %v", got, err)
	}
	want(t, s.BindSession(ctx, store.Session{ID: "s-1", TenantID: "acme", WorkerID: "w-1", IncarnationID: incB}), nil)
	got, err := s.Session(ctx, "s-1")
	if err != nil || got == nil || got.ID != "s-1" || got.TenantID != "acme" || got.WorkerID != "w-1" || got.IncarnationID != incB || got.LastUsed.IsZero() {
		t.Fatalf("bound session: %+v %v", got, err)
	}
	auth := pair(t, s, worker)
	_, err = register(t, s, incA, auth, caps(true, false))
	want(t, err, nil)
	a, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: worker, AssignmentID: bridge.NewID(), LeaseTokenHash: bridge.HashSecret(token),
		ExpiresAt: time.Now().Add(time.Minute), RuntimeSessionID: "s-2", ExecutionKind: bridge.KindSandbox, Request: []byte(`{}`),
		Session: &store.Session{ID: "s-2", TenantID: "acme", Stateful: true}})
	want(t, err, nil)
	got, err = s.Session(ctx, "s-2")
	if err != nil || got == nil || got.WorkerID != worker || got.IncarnationID != incA || !got.Stateful {
		t.Fatalf("session recorded with its assignment: %+v %v", got, err)
	}
	_, _ = s.Lease(ctx, worker, incA, auth.IdentityID)
	want(t, ack(s, a), nil)
	want(t, settle(s, a, auth, bridge.StatusRejected, `{"r":1}`), nil)
	want(t, s.ResetWorkspace(ctx, worker, incA, "s-2"), nil)
	if got, _ := s.Session(ctx, "s-2"); got == nil || got.IncarnationID != "" || got.WorkerID != worker {
		t.Fatalf("session after a reset: %+v", got)
	}
}
