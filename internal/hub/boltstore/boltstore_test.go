package boltstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/hub/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) store.Store {
		s, err := Open(filepath.Join(t.TempDir(), "bridge.db"), WithLeaseTTL(cfg.LeaseTTL), WithGrace(cfg.Grace))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// E32: identities, generations and fences survive a restart; in-memory work
// and pre-restart proofs do not.
func TestRestartPersistence(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "bridge.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store file mode: %v %v", fi.Mode(), err)
	}
	code, cred := bridge.HashSecret("code-0000000000000000"), bridge.HashSecret("cred")
	if err := s.CreatePairing(ctx, "w", code, nil, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	id, err := s.RedeemPairing(ctx, store.RedeemParams{WorkerID: "w", CodeHash: code, PublicKey: "pk", PublicKeyValid: true,
		CredentialHash: cred, ExpiresAt: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.Credential(ctx, "w", cred)
	auth := store.Auth{CredentialHash: cred, IdentityID: id, PairingGeneration: c.PairingGeneration}
	caps := bridge.Capabilities{SandboxProfile: "p", Runtimes: []string{}}
	const incA, incB = "AAAAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBBBB"
	if _, err := s.Register(ctx, store.RegisterParams{WorkerID: "w", IncarnationID: incA, Capabilities: caps, Auth: auth}); err != nil {
		t.Fatal(err)
	}
	rb, err := s.Register(ctx, store.RegisterParams{WorkerID: "w", IncarnationID: incB, Capabilities: caps, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: "w", AssignmentID: bridge.NewID(), LeaseTokenHash: "h", ExpiresAt: time.Now().Add(time.Minute), Request: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := s.UseNonce(ctx, cred, "n", before); err != nil {
		t.Fatal(err)
	}
	// bbolt's file lock admits one process (and one open handle).
	if _, err := Open(path, WithLockTimeout(100*time.Millisecond)); err == nil {
		t.Fatal("second open of a locked store succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Worker(ctx, "w"); err != ErrClosed {
		t.Fatalf("closed store: %v", err)
	}
	time.Sleep(5 * time.Millisecond)

	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Credential(ctx, "w", cred); err != nil {
		t.Fatalf("identity lost: %v", err)
	}
	if err := s2.UseNonce(ctx, cred, "fresh", before); err != bridge.ErrProofReplayed {
		t.Fatalf("pre-restart proof accepted: %v", err)
	}
	if _, err := s2.Register(ctx, store.RegisterParams{WorkerID: "w", IncarnationID: incA, Capabilities: caps, Auth: auth}); err != bridge.ErrWorkerFenced {
		t.Fatalf("fence lost: %v", err)
	}
	rb2, err := s2.Register(ctx, store.RegisterParams{WorkerID: "w", IncarnationID: incB, Capabilities: caps, Auth: auth})
	if err != nil || rb2.Generation != rb.Generation {
		t.Fatalf("generation %v %v", rb2, err)
	}
	if _, err := s2.Complete(ctx, "w", a.ID); err != bridge.ErrAssignmentExpired {
		t.Fatalf("in-flight work: %v", err)
	}
	b, err := s2.Enqueue(ctx, store.EnqueueParams{WorkerID: "w", AssignmentID: bridge.NewID(), LeaseTokenHash: "h", ExpiresAt: time.Now().Add(time.Minute), Request: []byte("{}")})
	if err != nil || b.Generation <= a.Generation {
		t.Fatalf("assignment generation not monotonic: %v %v", b, err)
	}
}

// A nonce is remembered for at least the nonce TTL and forgotten after two
// rotations.
func TestNonceLifetime(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "bridge.db"), WithNonceTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ts := time.Now().Add(time.Second)
	if err := s.UseNonce(ctx, "c", "n", ts); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if err := s.UseNonce(ctx, "c", "n", ts); err != bridge.ErrProofReplayed {
			t.Fatalf("nonce forgotten within its TTL: %v", err)
		}
	}
	// Rotation is lazy: two rotations, one TTL apart, forget it.
	for _, n := range []string{"x", "y"} {
		time.Sleep(110 * time.Millisecond)
		if err := s.UseNonce(ctx, "c", n, ts); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.UseNonce(ctx, "c", "n", ts); err != nil {
		t.Fatalf("nonce kept beyond two TTLs: %v", err)
	}
}

// §10.3: a fulfilled stateful settlement commits the session (clears its workspace fence) in the same
// transaction that stores it. When that cannot be persisted the settlement is refused as a store outage
// (the worker retries it) and nothing of it is kept: no settlement, the lock and the fence stay.
func TestSettleCommitFailureKeepsFence(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	const w, inc = "q", "AAECAwQFBgcICQoLDA0ODxAR"
	caps := bridge.Capabilities{StatefulWorkspace: true, SandboxProfile: "p"}
	if _, err := s.Register(ctx, store.RegisterParams{WorkerID: w, IncarnationID: inc, Capabilities: caps}); err != nil {
		t.Fatal(err)
	}
	a, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: w, AssignmentID: bridge.NewID(), LeaseTokenHash: "h", ExpiresAt: time.Now().Add(time.Minute), RuntimeSessionID: "sess", Request: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lease(ctx, w, inc, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(ctx, store.AckParams{WorkerID: w, AssignmentID: a.ID, IncarnationID: inc, Generation: a.Generation, LeaseTokenHash: "h"}); err != nil {
		t.Fatal(err)
	}
	// Break persistence underneath the store.
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	err = s.Settle(ctx, store.SettleParams{WorkerID: w, AssignmentID: a.ID, IncarnationID: inc, Generation: a.Generation, LeaseTokenHash: "h", Status: bridge.StatusFulfilled, Canonical: []byte(`{}`)})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("settle without a database: %v", err)
	}
	if st, err := s.Settlement(ctx, w, a.ID); err != nil || st != nil {
		t.Fatalf("a settlement whose commit failed was kept: %v %v", st, err)
	}
	if st, _ := s.Worker(ctx, w); !st.Online || !st.Busy {
		t.Fatalf("worker after the failed settle: %+v", st)
	}
	s.closed = true // the handle is already closed
}

// openBackend opens a fresh store file and returns its backend.
func openBackend(t *testing.T) store.Backend {
	s, err := Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	return s.Backend()
}

// The protocol over the bbolt backend survives a failure or timeout at
// every primitive call without losing or double-settling an assignment.
func TestFaults(t *testing.T) { storetest.RunFaults(t, openBackend) }

// The bbolt backend's primitives (what other hub state builds on).
func TestBackend(t *testing.T) { storetest.RunBackend(t, openBackend) }
