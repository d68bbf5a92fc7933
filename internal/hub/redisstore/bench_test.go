package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/redisstore"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/hub/storetest"
)

// One full assignment cycle (enqueue, lease, ack, settle, complete) on one
// worker: five optimistic transactions against a loopback Redis.
func BenchmarkAssignmentCycle(b *testing.B) {
	s := openStore(b)
	defer s.Close()
	storetest.Register(b, s, "bench", incA)
	for b.Loop() {
		storetest.Cycle(b, s, "bench", incA)
	}
}

// Cycles on eight workers at once through two store instances (replicas):
// transactions on different workers never conflict, so this scales with
// the server rather than retrying.
func BenchmarkAssignmentCycleParallel(b *testing.B) {
	prefix := freshPrefix()
	var stores []*redisstore.Store
	for range 2 {
		s, err := redisstore.Open(context.Background(), needRedis(b), redisstore.WithPrefix(prefix))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	const workers = 8
	for i := range workers {
		storetest.Register(b, stores[0], fmt.Sprintf("bench-%d", i), incA)
	}
	b.ResetTimer()
	per := b.N/workers + 1
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				storetest.Cycle(b, stores[i%2], fmt.Sprintf("bench-%d", i), incA)
			}
		}()
	}
	wg.Wait()
}

// The most frequent operation: a waiting worker's poll finding nothing.
func BenchmarkLeaseEmpty(b *testing.B) {
	s := openStore(b)
	defer s.Close()
	storetest.Register(b, s, "idle", incA)
	ctx := context.Background()
	for b.Loop() {
		if a, err := s.Lease(ctx, "idle", incA, ""); err != nil || a != nil {
			b.Fatal(a, err)
		}
	}
}

func BenchmarkUseNonce(b *testing.B) {
	s := openStore(b)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().Add(time.Second)
	for b.Loop() {
		if err := s.UseNonce(ctx, "c", bridge.NewID(), now); err != nil {
			b.Fatal(err)
		}
	}
}

// Latency from an Enqueue on one replica to the wake-up on another through
// the change feed.
func BenchmarkChangeFeedLatency(b *testing.B) {
	prefix := freshPrefix()
	ctx := context.Background()
	a, err := redisstore.Open(ctx, needRedis(b), redisstore.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	s, err := redisstore.Open(ctx, needRedis(b), redisstore.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.Register(b, s, "feed", incA)
	woke := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.WatchChanges(wctx, "bench", func(string) {
			select {
			case woke <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()
	// Wait for the subscription.
	for {
		_ = s.Ready(ctx, "feed", incA, 1)
		select {
		case <-woke:
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	for b.Loop() {
		for len(woke) > 0 {
			<-woke
		}
		a1, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: "feed", AssignmentID: bridge.NewID(), LeaseTokenHash: "h", ExpiresAt: time.Now().Add(time.Minute), Request: []byte(`{}`)})
		if err != nil {
			b.Fatal(err)
		}
		<-woke
		b.StopTimer()
		// Withdraw frees the worker for the next round (and publishes too).
		if err := s.Withdraw(ctx, "feed", a1.ID); err != nil {
			b.Fatal(err)
		}
		<-woke
		b.StartTimer()
	}
}
