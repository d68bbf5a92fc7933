package boltstore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// One full assignment cycle: enqueue (persists the generation), lease, ack,
// settle, complete.
func BenchmarkAssignmentCycle(b *testing.B) {
	ctx := context.Background()
	s, err := Open(filepath.Join(b.TempDir(), "bridge.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const w, inc = "bench", "AAECAwQFBgcICQoLDA0ODxAR"
	if _, err := s.Register(ctx, store.RegisterParams{WorkerID: w, IncarnationID: inc, Capabilities: bridge.Capabilities{SandboxProfile: "p"}}); err != nil {
		b.Fatal(err)
	}
	settle := []byte(`{"protocolVersion":1,"status":"fulfilled","result":{}}`)
	for b.Loop() {
		a, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: w, AssignmentID: bridge.NewID(), LeaseTokenHash: "h", ExpiresAt: time.Now().Add(time.Minute), Request: []byte(`{}`)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Lease(ctx, w, inc, ""); err != nil {
			b.Fatal(err)
		}
		if err := s.Ack(ctx, store.AckParams{WorkerID: w, AssignmentID: a.ID, IncarnationID: inc, Generation: a.Generation, LeaseTokenHash: "h"}); err != nil {
			b.Fatal(err)
		}
		if err := s.Settle(ctx, store.SettleParams{WorkerID: w, AssignmentID: a.ID, IncarnationID: inc, Generation: a.Generation, LeaseTokenHash: "h", Status: bridge.StatusFulfilled, Canonical: settle}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Complete(ctx, w, a.ID); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUseNonce(b *testing.B) {
	ctx := context.Background()
	s, err := Open(filepath.Join(b.TempDir(), "bridge.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now().Add(time.Second)
	for b.Loop() {
		if err := s.UseNonce(ctx, "c", bridge.NewID(), now); err != nil {
			b.Fatal(err)
		}
	}
}
