package boltstore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/storetest"
)

// One full assignment cycle: enqueue (persists the generation), lease, ack,
// settle, complete.
func BenchmarkAssignmentCycle(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bridge.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const w, inc = "bench", "AAECAwQFBgcICQoLDA0ODxAR"
	storetest.Register(b, s, w, inc)
	for b.Loop() {
		storetest.Cycle(b, s, w, inc)
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
