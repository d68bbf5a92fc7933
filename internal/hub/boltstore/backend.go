package boltstore

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/codellm/codellm/internal/hub/store"
)

var (
	bucketRecords = []byte("records")
	// Buckets of the first file format, migrated at open.
	bucketWorkers = []byte("workers")
	bucketCodes   = []byte("codes")
)

// epochKey is the durable record naming this file's data.
const epochKey = "epoch"

type entry struct {
	val   []byte
	class store.Class
	exp   time.Time // zero: never
}

// backend implements store.Backend: every record is in memory, durable ones
// also in the file (written before they become visible, so a failed write
// changes nothing). One mutex serialises transactions.
type backend struct {
	db       *bolt.DB
	now      func() time.Time
	openedAt time.Time

	mu     sync.Mutex
	closed bool
	recs   map[string]entry
	sets   map[string]map[string]struct{}
	zsets  map[string]*zset
	exp    expiryHeap
	nonces map[time.Duration]*nonceGens
	// notify is told the topics of each commit, after it (OnNotify).
	notify atomic.Pointer[func(string)]
}

var _ store.Backend = (*backend)(nil)

func newBackend(db *bolt.DB, now func() time.Time) (*backend, error) {
	b := &backend{db: db, now: now, openedAt: now(), recs: map[string]entry{}, sets: map[string]map[string]struct{}{}, zsets: map[string]*zset{},
		nonces: map[time.Duration]*nonceGens{}}
	err := db.Update(func(tx *bolt.Tx) error {
		rb, err := tx.CreateBucketIfNotExists(bucketRecords)
		if err != nil {
			return err
		}
		if err := migrate(tx, rb); err != nil {
			return err
		}
		return rb.ForEach(func(k, v []byte) error {
			e, err := unpack(v)
			if err != nil {
				return fmt.Errorf("record %q: %w", k, err)
			}
			b.recs[string(k)] = e
			if !e.exp.IsZero() {
				heap.Push(&b.exp, expiry{key: string(k), at: e.exp})
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// migrate moves the first format's buckets (worker ID → record, code hash
// → worker ID) into the records bucket under the protocol's keys.
func migrate(tx *bolt.Tx, rb *bolt.Bucket) error {
	for _, m := range []struct {
		bucket []byte
		key    func(k []byte) string
	}{
		{bucketWorkers, func(k []byte) string { return "{w:" + string(k) + "}:rec" }},
		{bucketCodes, func(k []byte) string { return "code:" + string(k) }},
	} {
		old := tx.Bucket(m.bucket)
		if old == nil {
			continue
		}
		if err := old.ForEach(func(k, v []byte) error {
			return rb.Put([]byte(m.key(k)), pack(v, time.Time{}))
		}); err != nil {
			return err
		}
		if err := tx.DeleteBucket(m.bucket); err != nil {
			return err
		}
	}
	return nil
}

// pack prefixes a durable value with its expiry (Unix nanoseconds, 0 = never).
func pack(v []byte, exp time.Time) []byte {
	out := make([]byte, 8, 8+len(v))
	if !exp.IsZero() {
		binary.BigEndian.PutUint64(out, uint64(exp.UnixNano()))
	}
	return append(out, v...)
}

func unpack(v []byte) (entry, error) {
	if len(v) < 8 {
		return entry{}, fmt.Errorf("%w: short record", store.ErrCorrupt)
	}
	e := entry{val: slices.Clone(v[8:]), class: store.Durable}
	if n := binary.BigEndian.Uint64(v[:8]); n != 0 {
		e.exp = time.Unix(0, int64(n))
	}
	return e, nil
}

// begin locks the backend for one operation and drops expired records.
func (b *backend) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	b.gc(b.now())
	return nil
}

func (b *backend) get(key string, now time.Time) []byte {
	e, ok := b.recs[key]
	if !ok || (!e.exp.IsZero() && !now.Before(e.exp)) {
		return nil
	}
	return e.val
}

// Read implements store.Backend.
func (b *backend) Read(ctx context.Context, keys ...string) ([][]byte, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	now := b.now()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = b.get(k, now)
	}
	return out, nil
}

// Members implements store.Backend.
func (b *backend) Members(ctx context.Context, set string) ([]string, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	return slices.Collect(maps.Keys(b.sets[set])), nil
}

// Update implements store.Backend. The topics the transaction notified are told after the lock is
// released, so that the listener may call the store.
func (b *backend) Update(ctx context.Context, fn func(store.Txn) error) error {
	t, ferr := b.update(ctx, fn)
	if t != nil {
		if fn := b.notify.Load(); fn != nil {
			for _, topic := range t.topics {
				(*fn)(topic)
			}
		}
	}
	return ferr
}

// update runs and commits one transaction; t is nil when nothing was committed.
func (b *backend) update(ctx context.Context, fn func(store.Txn) error) (*txn, error) {
	if err := b.begin(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	t := &txn{b: b, now: b.now(), writes: map[string]*entry{}}
	ferr := fn(t)
	if cause, abort := store.IsAbort(ferr); abort {
		return nil, cause
	}
	if err := b.persist(t); err != nil {
		return nil, err
	}
	b.apply(t)
	return t, ferr
}

// OnNotify implements store.Backend.
func (b *backend) OnNotify(fn func(string)) { b.notify.Store(&fn) }

// persist writes the transaction's durable changes to the file.
func (b *backend) persist(t *txn) error {
	durable := false
	for k, w := range t.writes {
		if (w != nil && w.class == store.Durable) || b.inFile(k) {
			durable = true
			break
		}
	}
	if !durable {
		return nil
	}
	err := b.db.Update(func(tx *bolt.Tx) error {
		rb := tx.Bucket(bucketRecords)
		for k, w := range t.writes {
			switch {
			case w != nil && w.class == store.Durable:
				if err := rb.Put([]byte(k), pack(w.val, w.exp)); err != nil {
					return err
				}
			case b.inFile(k):
				if err := rb.Delete([]byte(k)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return store.Unavailable(fmt.Errorf("boltstore: persist: %w", err))
	}
	return nil
}

// inFile reports whether key has a durable record (in the file).
func (b *backend) inFile(key string) bool {
	e, ok := b.recs[key]
	return ok && e.class == store.Durable
}

// apply makes a persisted transaction visible.
func (b *backend) apply(t *txn) {
	for k, w := range t.writes {
		if w == nil {
			delete(b.recs, k)
			continue
		}
		b.recs[k] = *w
		if !w.exp.IsZero() {
			heap.Push(&b.exp, expiry{key: k, at: w.exp})
		}
	}
	b.applyZ(t.zsetOps)
	for _, op := range t.setOps {
		s := b.sets[op.set]
		if op.add {
			if s == nil {
				s = map[string]struct{}{}
				b.sets[op.set] = s
			}
			s[op.member] = struct{}{}
		} else {
			delete(s, op.member)
		}
	}
}

// gc drops records whose expiry passed (each record is in the heap once per
// write; an entry that no longer matches the record's expiry is stale).
func (b *backend) gc(now time.Time) {
	for len(b.exp) > 0 && !now.Before(b.exp[0].at) {
		x := heap.Pop(&b.exp).(expiry)
		if e, ok := b.recs[x.key]; ok && e.exp.Equal(x.at) {
			delete(b.recs, x.key)
		}
	}
}

// InsertNew implements store.Backend. Nonces live in two generations
// rotated every ttl, so each is remembered for between one and two TTLs at
// O(1) cost; none survives a restart, so a proof dated before the store was
// opened might have been seen by the previous process.
func (b *backend) InsertNew(ctx context.Context, key string, ttl time.Duration, notBefore time.Time) (bool, error) {
	if err := b.begin(ctx); err != nil {
		return false, err
	}
	defer b.mu.Unlock()
	if notBefore.Before(b.openedAt) {
		return false, nil
	}
	g := b.nonces[ttl]
	now := b.now()
	if g == nil {
		g = &nonceGens{cur: map[string]struct{}{}, epoch: now}
		b.nonces[ttl] = g
	}
	if now.Sub(g.epoch) >= ttl {
		// Everything in the old generation predates the epoch, which is at
		// least one TTL ago; everything current moves to old and survives
		// until the next rotation, at least one TTL from now.
		g.old, g.cur, g.epoch = g.cur, map[string]struct{}{}, now
	}
	if _, seen := g.cur[key]; seen {
		return false, nil
	}
	if _, seen := g.old[key]; seen {
		return false, nil
	}
	g.cur[key] = struct{}{}
	return true, nil
}

type nonceGens struct {
	cur, old map[string]struct{}
	epoch    time.Time
}

// Epoch implements store.Backend: a durable record written once per file.
func (b *backend) Epoch(ctx context.Context, create bool) (string, error) {
	if v, err := b.Read(ctx, epochKey); err != nil || v[0] != nil || !create {
		if err != nil {
			return "", err
		}
		return string(v[0]), nil
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	val := strconv.FormatInt(b.now().UnixMilli(), 10) + "-" + hex.EncodeToString(id[:])
	var got string
	err := b.Update(ctx, func(tx store.Txn) error {
		v, _ := tx.Get(epochKey)
		if v[0] != nil {
			got = string(v[0])
			return nil
		}
		tx.Put(epochKey, []byte(val), store.Durable, time.Time{})
		got = val
		return nil
	})
	return got, err
}

// Now implements store.Backend.
func (b *backend) Now() time.Time { return b.now() }

// Close implements store.Backend.
func (b *backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.db.Close()
}

// txn is one transaction: reads see the backend and earlier writes; the
// writes are applied by Update.
type txn struct {
	b       *backend
	now     time.Time
	writes  map[string]*entry // nil: delete
	setOps  []setOp
	zsetOps []zsetOp
	topics  []string
}

type setOp struct {
	set, member string
	add         bool
}

func (t *txn) Get(keys ...string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if w, ok := t.writes[k]; ok {
			if w != nil {
				out[i] = w.val
			}
			continue
		}
		out[i] = t.b.get(k, t.now)
	}
	return out, nil
}

func (t *txn) Put(key string, value []byte, class store.Class, expiresAt time.Time) {
	t.writes[key] = &entry{val: value, class: class, exp: expiresAt}
}

func (t *txn) Delete(key string)            { t.writes[key] = nil }
func (t *txn) SetAdd(set, member string)    { t.setOps = append(t.setOps, setOp{set, member, true}) }
func (t *txn) SetRemove(set, member string) { t.setOps = append(t.setOps, setOp{set, member, false}) }

// NotifyAt implements store.Txn: one process, so Notify.
func (t *txn) NotifyAt(_, topic string) { t.Notify(topic) }

func (t *txn) Notify(topic string) {
	if !slices.Contains(t.topics, topic) {
		t.topics = append(t.topics, topic)
	}
}
func (t *txn) Now() time.Time { return t.now }

type expiry struct {
	key string
	at  time.Time
}

// expiryHeap orders records by expiry, earliest first.
type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
