// Package boltstore is the hub's embedded, single-node store (spec §7.4):
// the store.Backend primitives over a bbolt file. Durable records —
// identities, credentials, pairing codes, generations, fence and quarantine
// marks, workspace fences — persist in the file; volatile records — queues,
// claims, locks, registrations, assignments and nonces — live in memory, so
// after a restart in-flight work ends ASSIGNMENT_EXPIRED and proofs dated
// before the store was opened are rejected as replays. bbolt's file lock
// admits one process, which is what makes the in-memory half safe. The
// protocol rules themselves are store.Protocol's.
package boltstore

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/codellm/codellm/internal/hub/store"
)

// generationBlock is how many assignment generations one persisted
// reservation covers, so that a dispatch does not cost an fsync.
const generationBlock = 1024

// ErrClosed is returned by every operation after Close.
var ErrClosed = store.Unavailable(errClosed{})

type errClosed struct{}

func (errClosed) Error() string { return "boltstore: store is closed" }

// Option configures a Store.
type Option func(*config)

type config struct {
	proto       store.Options
	lockTimeout time.Duration
	now         func() time.Time
}

// WithLeaseTTL sets the registration lifetime (default 60 s).
func WithLeaseTTL(d time.Duration) Option { return func(c *config) { c.proto.LeaseTTL = d } }

// WithNonceTTL sets how long a nonce is remembered (default 120 s).
func WithNonceTTL(d time.Duration) Option { return func(c *config) { c.proto.NonceTTL = d } }

// WithGrace sets how long records outlive an assignment deadline (default 30 s).
func WithGrace(d time.Duration) Option { return func(c *config) { c.proto.Grace = d } }

// WithLockTimeout bounds the wait for another process's file lock (default 2 s).
func WithLockTimeout(d time.Duration) Option { return func(c *config) { c.lockTimeout = d } }

// WithClock replaces time.Now (tests of expiry).
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// Store is the embedded store: the hub's protocol over the bbolt backend.
type Store struct {
	*store.Protocol
	db     *bolt.DB
	closed bool
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store file at path with mode 0600.
func Open(path string, opts ...Option) (*Store, error) {
	c := config{lockTimeout: 2 * time.Second, now: time.Now, proto: store.Options{GenerationBlock: generationBlock}}
	for _, o := range opts {
		o(&c)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("boltstore: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: c.lockTimeout})
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	_ = os.Chmod(path, 0o600)
	b, err := newBackend(db, c.now)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: load: %w", err)
	}
	return &Store{Protocol: store.NewProtocol(b, c.proto), db: db}, nil
}

// Close releases the file lock.
func (s *Store) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.Protocol.Close()
}
