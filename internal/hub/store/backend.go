package store

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Backend is the storage below the hub's protocol: a few atomic primitives
// over opaque records, which the embedded bbolt store and the Redis store
// each implement. The protocol rules (Protocol) are written once over it, and
// other hub state (idempotency records, file indexes) can use it the same
// way: a record per key, read and written in one transaction, with a
// lifetime.
//
// Keys are plain strings chosen by the caller. A key may contain a hash tag
// ("{w:<id>}") so that a sharded backend can keep one worker's records
// together; backends may prefix keys with their own namespace.
type Backend interface {
	// Update runs fn as one atomic transaction: the records fn reads with
	// Txn.Get are watched, and the writes it makes are applied together
	// when fn returns, or not at all. fn may run more than once (optimistic
	// backends rerun it when a watched record changed meanwhile), so it must
	// not have side effects outside the Txn. The writes are applied when fn
	// returns nil or a plain error (a protocol refusal that still records,
	// for example, a burned pairing code); when fn returns Abort(err) or a
	// Txn.Get failed, nothing is written and Update returns the cause.
	Update(ctx context.Context, fn func(Txn) error) error
	// Read returns one consistent snapshot of several records (nil for an
	// absent or expired one), without a transaction.
	Read(ctx context.Context, keys ...string) ([][]byte, error)
	// Members lists a set written with Txn.SetAdd.
	Members(ctx context.Context, set string) ([]string, error)
	// ZPopMin removes and returns the lowest-scored member of the sorted
	// set key (ties: the lexically first), or ok false when it is empty.
	// It is atomic: two callers never get the same member.
	ZPopMin(ctx context.Context, key string) (member string, ok bool, err error)
	// ZFirst returns the lowest-scored member of key without removing it.
	ZFirst(ctx context.Context, key string) (member string, ok bool, err error)
	// ZCount counts the members of key scored at least min.
	ZCount(ctx context.Context, key string, min float64) (int, error)
	// InsertNew records key for at least ttl (a backend may keep it up to
	// twice as long) unless it is already recorded, reporting whether it
	// inserted. It also reports false when the backend's memory of such keys
	// may have begun after notBefore (it restarted or lost its data since),
	// so that a caller treating a false as "seen before" fails closed. A
	// shared backend may notice a loss of its data up to a second late
	// (redisstore.DefaultEpochRecheck): the loss erased the credentials a
	// replay would need as well.
	InsertNew(ctx context.Context, key string, ttl time.Duration, notBefore time.Time) (bool, error)
	// Epoch returns the identity of this store's data: a value written when
	// the data was created and lost with it ("" when absent). With create it
	// writes a new one if there is none and returns whichever is stored.
	Epoch(ctx context.Context, create bool) (string, error)
	// Now is the backend's clock (tests replace it).
	Now() time.Time
	// OnNotify sets the listener told, after each commit of this process,
	// the topics it notified (the hub wakes its waiters with it).
	OnNotify(fn func(topic string))
	Close() error
}

// Topics of Txn.Notify. A waiter (a worker's lease poll, a dispatcher
// waiting for its settlement, a queued client) watches exactly the topic
// of what it waits for, so a change wakes the waiters it concerns and no
// other; each waiter still re-reads the store now and then (a backstop for
// a notification lost by a shared backend's feed).
func TopicWorker(workerID string) string { return "w:" + workerID }

// TopicWorkQueued is TopicWorker notified for work just queued for the worker: it names the assignment,
// so that the lease poll it wakes reads that assignment with the worker's records (one read, not two).
func TopicWorkQueued(workerID, assignmentID string) string {
	return TopicWorker(workerID) + " " + assignmentID
}

// SplitTopic separates a notified topic from the hint it may carry (TopicWorkQueued's assignment; worker
// IDs have no spaces).
func SplitTopic(notified string) (topic, hint string) {
	topic, hint, _ = strings.Cut(notified, " ")
	return topic, hint
}

// TopicAssignment is notified when an assignment's settlement is stored.
func TopicAssignment(id string) string { return "a:" + id }

// TopicFree is notified when a worker may have capacity again: a slot was
// released, or a worker registered or confirmed readiness.
const TopicFree = "free"

// TopicPools is notified when a registration created or joined a pool (the
// hubs' pool catalogs are refreshed).
const TopicPools = "pools"

// Txn is one transaction of Backend.Update.
type Txn interface {
	// Get reads records (nil for an absent or expired one) and watches
	// them. Writes made earlier in the same transaction are visible.
	Get(keys ...string) ([][]byte, error)
	// Put writes value, which expires at expiresAt (zero: never).
	Put(key string, value []byte, class Class, expiresAt time.Time)
	// Delete removes a record of any class.
	Delete(key string)
	// SetAdd and SetRemove change a set of short strings (Volatile class).
	SetAdd(set, member string)
	SetRemove(set, member string)
	// ZAdd puts member in the sorted set key (Volatile class) with score;
	// with keep a member already there keeps its score (and place). ZRem
	// removes a member; ZRemBelow every member scored below score.
	ZAdd(key, member string, score float64, keep bool)
	ZRem(key, member string)
	ZRemBelow(key string, score float64)
	// Notify wakes, after the commit, whoever waits on topic (TopicWorker,
	// TopicAssignment, TopicFree, …): in this process through OnNotify's
	// listener, and in every other hub replica of a shared backend through
	// its change feed. Nothing is woken when the transaction does not commit.
	Notify(topic string)
	// NotifyAt is Notify for a topic only hub replica replica waits on (a
	// dispatcher's assignment): a shared backend sends it to that replica
	// alone ("" : to every replica).
	NotifyAt(replica, topic string)
	// Now is the transaction's clock reading.
	Now() time.Time
}

// Class says what a record must survive.
type Class uint8

const (
	// Durable records (identities, credentials, generations, fences)
	// survive a restart of the hub with any backend.
	Durable Class = iota
	// Volatile records (registrations, locks, queues, assignments) are
	// in-flight state: the embedded backend keeps them in memory only, so
	// a restart ends in-flight work ASSIGNMENT_EXPIRED (spec §7.4).
	Volatile
)

var (
	// ErrUnavailable is matched (errors.Is) by every error that means the
	// store could not be reached or could not write: the hub answers 503
	// store_unavailable and the caller may retry.
	ErrUnavailable = errors.New("store unavailable")
	// ErrCorrupt is wrapped when a stored record cannot be decoded; the
	// operation fails closed without writing.
	ErrCorrupt = errors.New("store: corrupt record")
)

// Unavailable wraps a backend failure so that it matches ErrUnavailable
// while keeping its own text and cause.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// Abort marks an error returned by an Update function as one that must
// discard the transaction's writes.
func Abort(err error) error {
	if err == nil {
		return nil
	}
	var a *abortError
	if errors.As(err, &a) {
		return err
	}
	return &abortError{err: err}
}

// IsAbort reports whether err came from Abort, returning the cause.
func IsAbort(err error) (error, bool) {
	var a *abortError
	if errors.As(err, &a) {
		return a.err, true
	}
	return err, false
}

type abortError struct{ err error }

func (e *abortError) Error() string { return e.err.Error() }
func (e *abortError) Unwrap() error { return e.err }
