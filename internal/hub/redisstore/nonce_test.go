package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/redisstore"
)

// commandLog records the names of the commands a client sends (a
// pipeline's one by one; a script's own calls run in the server, unseen).
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (l *commandLog) add(cmds ...redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cmds {
		l.names = append(l.names, c.Name())
	}
}

// take returns the names logged since the last take, counted by name.
func (l *commandLog) take() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, n := range l.names {
		out[n]++
	}
	l.names = nil
	return out
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { l.add(cmd); return next(ctx, cmd) }
}
func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { l.add(cmds...); return next(ctx, cmds) }
}

// openLogged opens a store whose client logs its commands.
func openLogged(t *testing.T, prefix string, opts ...redisstore.Option) (*redisstore.Store, *commandLog) {
	t.Helper()
	o, err := redis.ParseURL(needRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(o)
	log := &commandLog{}
	rdb.AddHook(log)
	s, err := redisstore.New(context.Background(), rdb, append([]redisstore.Option{redisstore.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, log
}

// A nonce costs one SET NX PX while the memo of the epoch is fresh, and the
// epoch script (three commands in the server) with every insert without the
// memo; a data loss is seen once the memo is older than its recheck time.
func TestNonceEpochMemo(t *testing.T) {
	ctx := context.Background()
	const recheck = 400 * time.Millisecond
	insert := func(s *redisstore.Store, n int, at time.Time) {
		t.Helper()
		for range n {
			if err := s.UseNonce(ctx, "cred", bridge.NewID(), at); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Now().Add(time.Second)

	without, wlog := openLogged(t, freshPrefix(), redisstore.WithEpochRecheck(0))
	wlog.take()
	insert(without, 10, now)
	if got := wlog.take(); got["evalsha"]+got["eval"] < 10 || got["set"] != 0 {
		t.Fatalf("without the memo: commands %v, want the epoch script with each of 10 inserts", got)
	}

	prefix := freshPrefix()
	s, log := openLogged(t, prefix, redisstore.WithEpochRecheck(recheck))
	log.take()
	insert(s, 10, now)
	if got := log.take(); got["set"] != 9 || got["evalsha"]+got["eval"] > 2 || len(got) > 3 {
		t.Fatalf("with the memo: commands %v, want the script once and 9 SETs", got)
	}
	// Dated before the keyspace: refused from the memo, without a command.
	if err := s.UseNonce(ctx, "cred", "old", time.Now().Add(-time.Hour)); !errors.Is(err, bridge.ErrProofReplayed) {
		t.Fatalf("proof older than the keyspace: %v", err)
	}
	if got := log.take(); len(got) != 0 {
		t.Fatalf("a proof older than the keyspace cost commands %v", got)
	}

	// Redis loses this store's keys; once the memo is older than recheck,
	// a proof dated before the loss is a replay again.
	recent := time.Now().Add(-50 * time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	rc := rawClient(t)
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v %v", keys, err)
	}
	if err := rc.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(recheck + 50*time.Millisecond)
	if err := s.UseNonce(ctx, "cred", "after-loss", recent); !errors.Is(err, bridge.ErrProofReplayed) {
		t.Fatalf("proof dated before a data loss, memo expired: %v", err)
	}
	insert(s, 1, time.Now().Add(time.Second))
}
