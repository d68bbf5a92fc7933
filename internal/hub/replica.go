package hub

import (
	"context"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// Every hub process is a replica with a random ID, alive while its heartbeat record ("replica:<id>",
// Volatile, three beats) is fresh: the embedded store forgets it when the process ends, Redis when the
// process stops renewing it. What a replica held that only it would have finished — idempotency claims of
// the requests it was running — is recognised by any replica (or by the next process on the same bbolt
// file) as orphaned once that record is gone, and ended rather than left pending or run again.

// defaultReplicaBeat is how often a replica renews its heartbeat record and sweeps (Config.replicaBeat);
// a heartbeat record outlives its last renewal by three beats.
const defaultReplicaBeat = 5 * time.Second

func replicaKey(id string) string { return "replica:" + id }

// replicasSet lists the replicas that have run on the store, until a sweep has ended what a dead one left.
const replicasSet = "replicas"

// replicaRecords is the part of the hub that needs a store.Backend (nil when the store has none).
type replicaRecords struct {
	beat time.Duration
	b    store.Backend
	st   store.Store
	id   string
	done chan struct{} // closed when the heartbeat loop has ended
	// onSwept is told how many assignments a sweep ended for a dead replica.
	onSwept func(replica string, n int)
	// deadSince is when the sweep first found each replica's heartbeat gone (sweep loop only).
	deadSince map[string]time.Time
}

// startReplica writes this replica's first heartbeat (best effort: an unreachable store is retried by the
// loop), then every beat renews it and sweeps the replicas found dead, until closing is closed.
func startReplica(st store.Store, b store.Backend, beat time.Duration, closing <-chan struct{}, onSwept func(string, int)) *replicaRecords {
	r := &replicaRecords{beat: beat, b: b, st: st, id: bridge.NewID(), done: make(chan struct{}), onSwept: onSwept, deadSince: map[string]time.Time{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = r.renew(ctx)
	cancel()
	go func() {
		defer close(r.done)
		t := time.NewTicker(beat)
		defer t.Stop()
		for {
			select {
			case <-closing:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), beat)
				if r.renew(ctx) == nil {
					r.sweep(ctx)
				}
				cancel()
			}
		}
	}()
	return r
}

// renew renews the heartbeat record.
func (r *replicaRecords) renew(ctx context.Context) error {
	return r.b.Update(ctx, func(tx store.Txn) error {
		tx.Put(replicaKey(r.id), []byte("1"), store.Volatile, tx.Now().Add(3*r.beat))
		tx.SetAdd(replicasSet, r.id)
		return nil
	})
}

// sweep ends what replicas found dead were waiting for (store.Abandon) and forgets them. A replica counts
// as dead once its heartbeat has stayed gone for two beats after this sweep first missed it: a store that
// was unreachable for longer than three beats, or lost its data, lets every heartbeat lapse at once, and the
// live replicas renew theirs within a beat of its return. Every replica sweeps; Abandon is idempotent.
func (r *replicaRecords) sweep(ctx context.Context) {
	ids, err := r.b.Members(ctx, replicasSet)
	if err != nil {
		return
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = replicaKey(id)
	}
	beats, err := r.b.Read(ctx, keys...)
	if err != nil {
		return
	}
	now := time.Now()
	for i, id := range ids {
		if beats[i] != nil || id == r.id {
			delete(r.deadSince, id)
			continue
		}
		since, seen := r.deadSince[id]
		if !seen {
			r.deadSince[id] = now
		}
		if !seen || now.Sub(since) < 2*r.beat {
			continue
		}
		delete(r.deadSince, id)
		n, err := r.st.Abandon(ctx, id)
		if n > 0 && r.onSwept != nil {
			r.onSwept(id, n)
		}
		if err == nil {
			_ = r.b.Update(ctx, func(tx store.Txn) error { tx.SetRemove(replicasSet, id); return nil })
		}
	}
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
