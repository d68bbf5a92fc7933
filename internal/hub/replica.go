package hub

import (
	"context"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// Every hub process is a replica with a random ID, alive while its heartbeat record ("replica:<id>",
// Volatile, replicaTTL) is fresh: the embedded store forgets it when the process ends, Redis when the
// process stops renewing it. What a replica held that only it would have finished — idempotency claims of
// the requests it was running — is recognised by any replica (or by the next process on the same bbolt
// file) as orphaned once that record is gone, and ended rather than left pending or run again.

const (
	// replicaBeat is how often a replica renews its heartbeat record.
	replicaBeat = 5 * time.Second
	// replicaTTL is how long a heartbeat record outlives its last renewal: three missed beats.
	replicaTTL = 3 * replicaBeat
)

func replicaKey(id string) string { return "replica:" + id }

// replicaRecords is the part of the hub that needs a store.Backend (nil when the store has none).
type replicaRecords struct {
	b    store.Backend
	id   string
	done chan struct{} // closed when the heartbeat loop has ended
}

// startReplica writes this replica's first heartbeat (best effort: an unreachable store is retried by the
// loop) and renews it every replicaBeat until closing is closed.
func startReplica(b store.Backend, closing <-chan struct{}) *replicaRecords {
	r := &replicaRecords{b: b, id: bridge.NewID(), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = r.beat(ctx)
	cancel()
	go func() {
		defer close(r.done)
		t := time.NewTicker(replicaBeat)
		defer t.Stop()
		for {
			select {
			case <-closing:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), replicaBeat)
				_ = r.beat(ctx)
				cancel()
			}
		}
	}()
	return r
}

// beat renews the heartbeat record.
func (r *replicaRecords) beat(ctx context.Context) error {
	return r.b.Update(ctx, func(tx store.Txn) error {
		tx.Put(replicaKey(r.id), []byte("1"), store.Volatile, tx.Now().Add(replicaTTL))
		return nil
	})
}

// alive reports whether replica id's heartbeat is fresh ("" names a record older than replicas: alive,
// bounded by its own expiry).
func (r *replicaRecords) alive(ctx context.Context, id string) (bool, error) {
	if id == "" || id == r.id {
		return true, nil
	}
	v, err := r.b.Read(ctx, replicaKey(id))
	if err != nil {
		return false, err
	}
	return v[0] != nil, nil
}
