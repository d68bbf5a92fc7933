package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// Register gives worker w a live registration of incarnation inc (for
// benchmarks of the stores).
func Register(b testing.TB, s store.Store, w, inc string) {
	b.Helper()
	if _, err := s.Register(context.Background(), store.RegisterParams{WorkerID: w, IncarnationID: inc,
		Capabilities: bridge.Capabilities{SandboxProfile: "p"}}); err != nil {
		b.Fatal(err)
	}
}

// Cycle runs one full assignment cycle on worker w: enqueue, lease, ack,
// settle, complete (the unit of the stores' benchmarks).
func Cycle(b testing.TB, s store.Store, w, inc string) {
	ctx := context.Background()
	settle := []byte(`{"protocolVersion":1,"status":"fulfilled","result":{}}`)
	a, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: w, AssignmentID: bridge.NewID(), LeaseTokenHash: "h",
		ExpiresAt: time.Now().Add(time.Minute), Request: []byte(`{}`)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Lease(ctx, w, inc, ""); err != nil {
		b.Fatal(err)
	}
	if err := s.Ack(ctx, store.AckParams{WorkerID: w, AssignmentID: a.ID, IncarnationID: inc, Generation: a.Generation,
		LeaseTokenHash: "h"}); err != nil {
		b.Fatal(err)
	}
	if err := s.Settle(ctx, store.SettleParams{WorkerID: w, AssignmentID: a.ID, IncarnationID: inc, Generation: a.Generation,
		LeaseTokenHash: "h", Status: bridge.StatusFulfilled, Canonical: settle}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Complete(ctx, w, a.ID); err != nil {
		b.Fatal(err)
	}
}
