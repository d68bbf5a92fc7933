package redisstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/redisstore"
)

// Two hub replicas on one Redis count one caller's /v1/exec requests against one budget (the Code API
// keeps its limiter in its Redis): three requests spread over both replicas spend a limit of 3, and the
// fourth is 429 on either. A count kept per replica would let it through.
func TestRateLimitAcrossReplicas(t *testing.T) {
	prefix := freshPrefix()
	limits := func(c *hub.Config) {
		c.RateLimits.Exec = hub.RateLimit{Max: 3, Window: time.Minute}
		c.QueueTimeout = 100 * time.Millisecond // no worker: each counted request ends 503 after the wait
	}
	a := newReplica(t, prefix, true, limits)
	b := newReplica(t, prefix, true, limits)
	for i, r := range []*replica{a, b, a} {
		if _, rep := execOn(context.Background(), r.root, "x"); rep.status != 503 {
			t.Fatalf("exec %d: %d %s", i, rep.status, rep.body)
		}
	}
	_, rep := execOn(context.Background(), b.root, "x")
	var body struct {
		Error string `json:"error"`
		Retry int    `json:"retry_after_seconds"`
	}
	if json.Unmarshal(rep.body, &body) != nil || rep.status != 429 || body.Error != "rate_limited" || body.Retry < 1 {
		t.Fatalf("4th exec on the other replica: %d %s", rep.status, rep.body)
	}
}

// A request that finds no worker on replica A waits, and runs once a worker registers through replica B
// (the registration reaches A through the store: its change feed or the waiter's poll).
func TestNoWorkerWaitAcrossReplicas(t *testing.T) {
	prefix := freshPrefix()
	long := func(c *hub.Config) { c.QueueTimeout = 20 * time.Second; c.ExecTimeout = 30 * time.Second }
	a := newReplica(t, prefix, true, long)
	b := newReplica(t, prefix, true, long)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	type result struct {
		out string
		r   reply
	}
	res := make(chan result, 1)
	go func() { out, r := execOn(ctx, a.root, "waited"); res <- result{out, r} }()
	// The request waits in the tenant's no-worker queue (queue.go's key) before any worker exists.
	st, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, err := st.Backend().ZCount(ctx, "tq:default:no-worker", -1); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the exec on A is not waiting in the queue")
		}
	}
	w := newSigWorker(t, "late-vm", b.base)
	defer w.close()
	w.pair(b.base)
	stop := w.serve(1000, func(*bridge.Assignment, reply) {})
	defer stop()
	got := <-res
	if got.r.status != 200 || got.out != "ran:waited" {
		t.Fatalf("the waiting exec on A: %d %s", got.r.status, got.r.body)
	}
}
