package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/redisstore"
	"github.com/codellm/codellm/internal/hub/store"
)

const (
	wid  = "race:vm"
	incA = "AAECAwQFBgcICQoLDA0ODxAR"
)

func rawClient(t *testing.T) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(needRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pairAndRegister gives worker wid an identity and a live registration.
func pairAndRegister(t *testing.T, s store.Store) store.Auth {
	t.Helper()
	ctx := context.Background()
	code := bridge.HashSecret(bridge.NewPairingCode())
	if err := s.CreatePairing(ctx, wid, code, nil, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	cred := bridge.HashSecret(bridge.NewSecret())
	id, err := s.RedeemPairing(ctx, store.RedeemParams{WorkerID: wid, CodeHash: code, PublicKey: "pk", PublicKeyValid: true,
		CredentialHash: cred, ExpiresAt: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Credential(ctx, wid, cred)
	if err != nil {
		t.Fatal(err)
	}
	auth := store.Auth{CredentialHash: cred, IdentityID: id, PairingGeneration: c.PairingGeneration}
	caps := bridge.Capabilities{SandboxProfile: "p", Runtimes: []string{"python"}}
	if _, err := s.Register(ctx, store.RegisterParams{WorkerID: wid, IncarnationID: incA, Capabilities: caps, Auth: auth}); err != nil {
		t.Fatal(err)
	}
	return auth
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	needRedis(t)
	if _, err := redisstore.Open(ctx, "http://127.0.0.1:6379/0"); !errors.Is(err, redisstore.ErrURL) {
		t.Fatalf("bad scheme: %v", err)
	}
	if _, err := redisstore.Open(ctx, "redis://127.0.0.1:6379/notanumber"); !errors.Is(err, redisstore.ErrURL) {
		t.Fatalf("bad db: %v", err)
	}
	// Nothing listens on port 1: Open fails now, not at the first request.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := redisstore.Open(cctx, "redis://127.0.0.1:1/0"); err == nil {
		t.Fatal("open against a closed port succeeded")
	}
	s := openStore(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Worker(ctx, "w"); !errors.Is(err, redisstore.ErrClosed) {
		t.Fatalf("closed Worker: %v", err)
	}
	if _, err := s.Register(ctx, store.RegisterParams{WorkerID: "w", IncarnationID: incA}); !errors.Is(err, redisstore.ErrClosed) {
		t.Fatalf("closed Register: %v", err)
	}
	if err := s.UseNonce(ctx, "c", "n", time.Now()); !errors.Is(err, redisstore.ErrClosed) {
		t.Fatalf("closed UseNonce: %v", err)
	}
}

// Nonces are SET NX PX: shared by every replica, forgotten after their TTL,
// and when Redis loses its data every proof dated before the loss is a
// replay (the epoch is re-created), while an intact keyspace accepts it.
// Replica a reads the epoch with every insert (TestNonceEpochMemo covers
// the memo).
func TestNonces(t *testing.T) {
	ctx := context.Background()
	prefix := freshPrefix()
	a, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix), redisstore.WithNonceTTL(300*time.Millisecond),
		redisstore.WithEpochRecheck(0))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix), redisstore.WithNonceTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.Now().Add(time.Second)
	if err := a.UseNonce(ctx, "cred", "n1", now); err != nil {
		t.Fatal(err)
	}
	if err := b.UseNonce(ctx, "cred", "n1", now); !errors.Is(err, bridge.ErrProofReplayed) {
		t.Fatalf("replay on the other replica: %v", err)
	}
	rc := rawClient(t)
	if ttl := rc.PTTL(ctx, prefix+"nonce:cred:n1").Val(); ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("nonce key TTL %v", ttl)
	}
	time.Sleep(350 * time.Millisecond)
	if err := b.UseNonce(ctx, "cred", "n1", now); err != nil {
		t.Fatalf("nonce remembered past its TTL: %v", err)
	}
	// Before the store was first opened: a replay.
	if err := a.UseNonce(ctx, "cred", "old", time.Now().Add(-time.Hour)); !errors.Is(err, bridge.ErrProofReplayed) {
		t.Fatalf("proof older than the keyspace: %v", err)
	}
	// A proof dated a moment ago (after the epoch) is fine while data is intact…
	recent := time.Now().Add(-50 * time.Millisecond)
	if err := a.UseNonce(ctx, "cred", "recent1", recent); err != nil {
		t.Fatal(err)
	}
	// …but after Redis lost everything it might be a replay. (Only this
	// store's keys are dropped: the server is shared.)
	time.Sleep(5 * time.Millisecond)
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v %v", keys, err)
	}
	if err := rc.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.UseNonce(ctx, "cred", "recent2", recent); !errors.Is(err, bridge.ErrProofReplayed) {
		t.Fatalf("proof dated before a data loss: %v", err)
	}
	if err := a.UseNonce(ctx, "cred", "fresh", time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
}

// Lifetimes are Redis key expiry: pairing code, registration, readiness,
// lock and assignment records carry TTLs; permanent records do not.
func TestKeyExpiry(t *testing.T) {
	ctx := context.Background()
	prefix := freshPrefix()
	s, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix), redisstore.WithLeaseTTL(10*time.Second),
		redisstore.WithGrace(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc := rawClient(t)
	code := bridge.HashSecret("code-ttl-0000000000")
	if err := s.CreatePairing(ctx, "ttl-vm", code, nil, time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	pttl := func(key string) time.Duration { return rc.PTTL(ctx, prefix+key).Val() }
	if d := pttl("code:" + code); d <= 4*time.Second || d > 5*time.Second {
		t.Fatalf("pairing code TTL %v", d)
	}
	pairAndRegister(t, s)
	w := "{w:" + wid + "}:"
	if d := pttl(w + "reg"); d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("registration TTL %v", d)
	}
	if d := pttl(w + "rec"); d != -1 {
		t.Fatalf("worker record must be permanent, TTL %v", d)
	}
	a, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: wid, AssignmentID: bridge.NewID(), LeaseTokenHash: "h",
		ExpiresAt: time.Now().Add(3 * time.Second), Request: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{w + "lock", w + "a:" + a.ID, "asg:" + a.ID} {
		if d := pttl(k); d <= 4*time.Second || d > 5*time.Second {
			t.Fatalf("%s TTL %v, want deadline + grace", k, d)
		}
	}
}

// Replicas race on one worker: exactly one dispatch takes the lock, and
// conflicting settlements of one assignment store exactly one.
func TestReplicasRace(t *testing.T) {
	ctx := context.Background()
	prefix := freshPrefix()
	var stores []*redisstore.Store
	for range 2 {
		s, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	auth := pairAndRegister(t, stores[0])
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	asg := make([]*store.Assignment, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			asg[i], errs[i] = stores[i%2].Enqueue(ctx, store.EnqueueParams{WorkerID: wid, AssignmentID: bridge.NewID(),
				LeaseTokenHash: "h", ExpiresAt: time.Now().Add(time.Minute), Request: []byte(`{}`)})
		}()
	}
	wg.Wait()
	var won *store.Assignment
	for i, err := range errs {
		switch {
		case err == nil && won == nil:
			won = asg[i]
		case err == nil:
			t.Fatal("two dispatches took the same worker's lock")
		case !errors.Is(err, bridge.ErrWorkerBusy):
			t.Fatalf("enqueue: %v", err)
		}
	}
	if won == nil {
		t.Fatal("no dispatch won")
	}
	l, err := stores[1].Lease(ctx, wid, incA, auth.IdentityID)
	if err != nil || l == nil || l.ID != won.ID || l.LeaseTokenHash != "h" {
		t.Fatalf("lease on the other replica: %+v %v", l, err)
	}
	if err := stores[0].Ack(ctx, store.AckParams{WorkerID: wid, AssignmentID: won.ID, IncarnationID: incA, Generation: won.Generation, LeaseTokenHash: "h"}); err != nil {
		t.Fatal(err)
	}
	settleErrs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(`{"n":` + string(rune('a'+i)) + `}`)
			settleErrs[i] = stores[i%2].Settle(ctx, store.SettleParams{WorkerID: wid, AssignmentID: won.ID, IncarnationID: incA,
				Generation: won.Generation, LeaseTokenHash: "h", IdentityID: auth.IdentityID, Status: bridge.StatusFulfilled, Canonical: body})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range settleErrs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, bridge.ErrAssignmentFenced):
			t.Fatalf("settle: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d conflicting settlements accepted", ok)
	}
	st, err := stores[1].Complete(ctx, wid, won.ID)
	if err != nil || st == nil {
		t.Fatalf("complete: %v %v", st, err)
	}
	// The generation counter is shared and monotonic.
	next, err := stores[1].Enqueue(ctx, store.EnqueueParams{WorkerID: wid, AssignmentID: bridge.NewID(), LeaseTokenHash: "h",
		ExpiresAt: time.Now().Add(time.Minute), Request: []byte(`{}`)})
	if err != nil || next.Generation != won.Generation+1 {
		t.Fatalf("next generation %+v %v after %d", next, err, won.Generation)
	}
}

// A record that cannot be decoded fails the operation closed and is left
// as it was.
func TestCorruptRecordFailsClosed(t *testing.T) {
	ctx := context.Background()
	prefix := freshPrefix()
	s, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc := rawClient(t)
	key := prefix + "{w:bad-vm}:rec"
	rc.Set(ctx, key, "{not json", 0)
	_, err = s.Register(ctx, store.RegisterParams{WorkerID: "bad-vm", IncarnationID: incA})
	if !errors.Is(err, redisstore.ErrCorrupt) {
		t.Fatalf("register over a corrupt record: %v", err)
	}
	if _, err := s.Credential(ctx, "bad-vm", "x"); !errors.Is(err, redisstore.ErrCorrupt) {
		t.Fatalf("credential over a corrupt record: %v", err)
	}
	if v := rc.Get(ctx, key).Val(); v != "{not json" {
		t.Fatalf("corrupt record rewritten: %q", v)
	}
	if n := rc.Exists(ctx, prefix+"{w:bad-vm}:reg").Val(); n != 0 {
		t.Fatal("registration written despite the failure")
	}
}

// The change feed brings other replicas' topics (not this replica's own, whose listener was told at
// once), again after its connection is killed (then "": everything), and stops with its context.
func TestWatchChanges(t *testing.T) {
	ctx := context.Background()
	prefix := freshPrefix()
	a, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	woke := make(chan string, 64)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.WatchChanges(wctx, "replica-a", func(topic string) { woke <- topic }) }()
	var local []string
	var mu sync.Mutex
	a.Backend().OnNotify(func(topic string) { mu.Lock(); local = append(local, topic); mu.Unlock() })
	// waitWake waits for want ("*": any topic), skipping others (late wakes of the publish loop below).
	waitWake := func(what, want string) {
		t.Helper()
		for end := time.After(10 * time.Second); ; {
			select {
			case got := <-woke:
				if want == "*" || got == want {
					return
				}
			case <-end:
				t.Fatalf("no wake-up for %s", what)
			}
		}
	}
	drain := func() {
		for len(woke) > 0 {
			<-woke
		}
	}
	// Subscribing is asynchronous: publish until the first wake arrives.
	pairAndRegister(t, b)
	deadline := time.Now().Add(10 * time.Second)
	for len(woke) == 0 && time.Now().Before(deadline) {
		if err := b.Ready(ctx, wid, incA, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitWake("subscription", "*")
	drain()
	asg, err := b.Enqueue(ctx, store.EnqueueParams{WorkerID: wid, AssignmentID: bridge.NewID(), LeaseTokenHash: "h",
		ExpiresAt: time.Now().Add(time.Minute), Request: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	waitWake("enqueue", store.TopicWorkQueued(wid, asg.ID))
	// A's own commit: its listener is told, its feed is not.
	time.Sleep(100 * time.Millisecond)
	drain()
	if err := a.Withdraw(ctx, wid, asg.ID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !slices.Contains(local, store.TopicFree) {
		t.Errorf("the local listener was told %v", local)
	}
	mu.Unlock()
	select {
	case got := <-woke:
		t.Fatalf("the feed repeated the replica's own topic %q", got)
	case <-time.After(200 * time.Millisecond):
	}
	// Kill the subscriber's connection: the feed resubscribes and wakes
	// once, since messages sent meanwhile are lost.
	drain()
	if err := rawClient(t).ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitWake("resubscribe", "")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchChanges did not stop with its context")
	}
}

// A settlement also frees its slot, so it is announced in one message (one PUBLISH) on the feed every
// replica hears: its dispatcher hears the settlement and the freed slot, and a replica of the previous
// message format (which reads everything after the first newline as the topic) hears the settlement, the
// topic it waits on.
func TestSettlementOneMessage(t *testing.T) {
	ctx := context.Background()
	prefix := freshPrefix()
	open := func() *redisstore.Store {
		s, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, w := open(), open()
	heard := make(chan string, 64)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = a.WatchChanges(wctx, "replica-a", func(topic string) { heard <- topic }) }()
	defer func() { cancel(); wg.Wait() }()
	raw := rawClient(t).PSubscribe(ctx, prefix+"changes*")
	defer raw.Close()
	if _, err := raw.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	auth := pairAndRegister(t, w)
	for ok := false; !ok; { // the feed is subscribed once it hears a broadcast
		if err := w.Ready(ctx, wid, incA, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard:
			ok = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	asg, err := w.Enqueue(ctx, store.EnqueueParams{WorkerID: wid, AssignmentID: bridge.NewID(), LeaseTokenHash: "h",
		ExpiresAt: time.Now().Add(time.Minute), Request: []byte(`{}`), Dispatcher: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Lease(ctx, wid, incA, auth.IdentityID); err != nil {
		t.Fatal(err)
	}
	published := func(d time.Duration) (got []*redis.Message) {
		for end := time.After(d); ; {
			select {
			case m := <-raw.Channel():
				got = append(got, m)
			case <-end:
				return got
			}
		}
	}
	published(200 * time.Millisecond)
	for len(heard) > 0 {
		<-heard
	}
	if err := w.Settle(ctx, store.SettleParams{WorkerID: wid, AssignmentID: asg.ID, IncarnationID: incA, Generation: asg.Generation,
		LeaseTokenHash: "h", IdentityID: auth.IdentityID, Status: bridge.StatusRejected, Canonical: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	topic := store.TopicAssignment(asg.ID)
	msgs := published(500 * time.Millisecond)
	if len(msgs) != 1 || msgs[0].Channel != prefix+"changes" {
		t.Fatalf("the settlement published %d messages, want 1 on the feed: %+v", len(msgs), msgs)
	}
	if _, old, _ := strings.Cut(msgs[0].Payload, "\n"); old != topic {
		t.Fatalf("a replica of the previous format reads %q, want %q", old, topic)
	}
	got := map[string]bool{}
	for end := time.After(5 * time.Second); !got[topic] || !got[store.TopicFree]; {
		select {
		case h := <-heard:
			got[h] = true
		case <-end:
			t.Fatalf("the dispatcher heard %v, want %s and %s", got, topic, store.TopicFree)
		}
	}
}
