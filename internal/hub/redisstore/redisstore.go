// Package redisstore is the hub's shared store on Redis (spec §7.4): the
// store.Backend primitives over Redis, so every record of §7.1 lives in
// Redis and any number of hub replicas can serve any worker. A transaction
// is optimistic (read with MGET, decide, then one script writes only if
// what was read is unchanged, else decide again); lifetimes are key expiry; InsertNew is SET NX PX
// guarded by the keyspace epoch (read with an insert at most once a
// second); and a transaction that changed dispatchable state publishes on a
// channel, so a replica wakes its long polls at once when another replica
// queues work. The protocol rules are store.Protocol's.
//
// Requirements on the server: a single Redis (or a Sentinel-managed
// primary), not Redis Cluster — a few transactions touch global keys (code
// index, assignment owner); and maxmemory-policy noeviction, because an
// evicted nonce or fence would silently weaken replay protection or fencing
// (Check reports both, and persistence).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// DefaultPrefix is the key namespace of §7.4.
const DefaultPrefix = "codellm:bridge:v1:"

var (
	// ErrClosed is returned by every operation after Close.
	ErrClosed = store.Unavailable(errors.New("redisstore: store is closed"))
	// ErrURL is wrapped by Open for a URL it cannot use.
	ErrURL = errors.New("redisstore: invalid redis URL")
	// ErrContention is returned when an operation kept losing its
	// optimistic transaction to concurrent writers.
	ErrContention = errors.New("redisstore: transaction contention")
	// ErrCorrupt is wrapped when a stored record cannot be decoded; the
	// operation fails closed without writing.
	ErrCorrupt = store.ErrCorrupt
)

// Option configures a Store.
type Option func(*config)

type config struct {
	proto        store.Options
	prefix       string
	epochRecheck time.Duration
}

// WithLeaseTTL sets the registration lifetime (default 60 s).
func WithLeaseTTL(d time.Duration) Option { return func(c *config) { c.proto.LeaseTTL = d } }

// WithNonceTTL sets how long a nonce is remembered (default 120 s).
func WithNonceTTL(d time.Duration) Option { return func(c *config) { c.proto.NonceTTL = d } }

// WithGrace sets how long records outlive an assignment deadline (default 30 s).
func WithGrace(d time.Duration) Option { return func(c *config) { c.proto.Grace = d } }

// WithEpochRecheck sets how long a nonce insert trusts the keyspace epoch it
// last read (default DefaultEpochRecheck); 0 reads it with every insert.
func WithEpochRecheck(d time.Duration) Option { return func(c *config) { c.epochRecheck = d } }

// WithPrefix replaces the key namespace (tests isolate stores this way).
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// Store is the shared store: the hub's protocol over the Redis backend.
type Store struct {
	*store.Protocol
	b *backend
}

var _ store.Store = (*Store)(nil)

// Open connects to url (redis://[user:pass@]HOST:PORT/DB or rediss://…),
// checks the server answers, and records the store epoch.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrURL, err)
	}
	// Long polls and the change feed must not be cut by the client; every
	// call carries its own context.
	o.ContextTimeoutEnabled = true
	failFast(o, url)
	return New(ctx, redis.NewClient(o), opts...)
}

// failFast makes an unreachable server an error within tens of
// milliseconds rather than seconds of go-redis's dial and command retries
// (the hub answers 503 store_unavailable and the caller retries), unless
// the URL sets its own max_retries or dial_timeout.
func failFast(o *redis.Options, url string) {
	if !strings.Contains(url, "max_retries=") {
		o.MaxRetries = 1
	}
	if !strings.Contains(url, "dial_timeout=") {
		o.DialTimeout = 2 * time.Second
	}
	o.DialerRetries, o.DialerRetryTimeout = 2, 20*time.Millisecond
}

// quietPool silences go-redis's own log (a line per failed dial of every
// pooled connection during an outage): the hub logs an outage once, counts
// it in its metrics and reports it in /readyz.
var quietPool = sync.OnceFunc(func() { redis.SetLogger(silent{}) })

type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// New wraps a client; the store owns it and closes it on Close.
func New(ctx context.Context, rdb *redis.Client, opts ...Option) (*Store, error) {
	quietPool()
	// Generations are reserved in blocks, as the embedded store does: a dispatch then need not rewrite
	// the worker's durable record.
	c := config{prefix: DefaultPrefix, proto: store.Options{GenerationBlock: 1024}, epochRecheck: DefaultEpochRecheck}
	for _, o := range opts {
		o(&c)
	}
	b := &backend{rdb: rdb, prefix: c.prefix, now: time.Now, origin: bridge.NewID(), epochRecheck: c.epochRecheck}
	// The epoch is when this keyspace was born. If Redis loses its data the
	// nonces go with it, so InsertNew re-creates the epoch and rejects every
	// proof dated before it (§7.4, fail closed).
	if _, err := b.Epoch(ctx, true); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redisstore: connect: %w", err)
	}
	return &Store{Protocol: store.NewProtocol(b, c.proto), b: b}, nil
}

// WatchChanges calls fn with every topic another replica's commit notified (work queued for a worker, a
// settlement stored, capacity freed, …; store.Txn.Notify), until ctx ends. A hub passes its wake-up
// function, so that a long poll on this replica answers at once when another replica queues its work.
// Its own commits are not repeated (its listener was told at once). After a reconnect fn is called with
// "" (everything), since messages sent meanwhile were lost.
//
// replica is the hub replica's ID: topics meant for it alone (store.Txn.NotifyAt) come on its own channel.
func (s *Store) WatchChanges(ctx context.Context, replica string, fn func(topic string)) error {
	b := s.b
	if b.closed.Load() {
		return ErrClosed
	}
	ps := b.rdb.Subscribe(ctx, b.changesChannel(), b.changesChannel()+":"+replica)
	// A blocked receive does not observe ctx; closing the subscription
	// unblocks it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	failed := false
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil || b.closed.Load() {
			return nil
		}
		if err != nil {
			failed = true
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			if origin, topics, ok := parseFeed(m.Payload); ok && origin != b.origin {
				for _, topic := range topics {
					fn(topic)
				}
			}
		case *redis.Subscription:
			if failed && strings.EqualFold(m.Kind, "subscribe") {
				failed = false
				fn("")
			}
		}
	}
}
