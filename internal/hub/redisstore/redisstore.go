// Package redisstore is the hub's shared store on Redis (spec §7.4): every
// record of §7.1 — identities, credentials, pairing codes, generations,
// fences, registrations, readiness, locks, queues, claims, assignments,
// settlements and nonces — lives in Redis, so any number of hub replicas can
// serve any worker. Each store.Store method is one optimistic transaction
// (WATCH the worker's keys, read, decide, MULTI/EXEC) with the same rules as
// the embedded boltstore; lifetimes are Redis key expiry, nonces are
// SET NX PX, and state changes are published on a channel so a replica
// wakes its long polls at once when another replica queues work.
//
// Requirements on the server: a single Redis (or a Sentinel-managed
// primary), not Redis Cluster — a few transactions touch global keys (code
// index, assignment owner); and maxmemory-policy noeviction, because an
// evicted nonce or fence would silently weaken replay protection or fencing.
package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// DefaultPrefix is the key namespace of §7.4.
const DefaultPrefix = "codellm:bridge:v1:"

// maxAttempts bounds optimistic retries of one operation. Transactions are
// per worker, so contention comes only from concurrent requests about the
// same worker; a few attempts settle it.
const maxAttempts = 64

var (
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("redisstore: store is closed")
	// ErrURL is wrapped by Open for a URL it cannot use.
	ErrURL = errors.New("redisstore: invalid redis URL")
	// ErrContention is returned when an operation kept losing its
	// optimistic transaction to concurrent writers.
	ErrContention = errors.New("redisstore: transaction contention")
	// ErrCorrupt is wrapped when a stored record cannot be decoded; the
	// operation fails closed without writing.
	ErrCorrupt = errors.New("redisstore: corrupt record")
)

// Option configures a Store.
type Option func(*Store)

// WithLeaseTTL sets the registration lifetime (default 60 s).
func WithLeaseTTL(d time.Duration) Option { return func(s *Store) { s.leaseTTL = d } }

// WithNonceTTL sets how long a nonce is remembered (default 120 s).
func WithNonceTTL(d time.Duration) Option { return func(s *Store) { s.nonceTTL = d } }

// WithGrace sets how long records outlive an assignment deadline (default 30 s).
func WithGrace(d time.Duration) Option { return func(s *Store) { s.grace = d } }

// WithPrefix replaces the key namespace (tests isolate stores this way).
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// workerRec is the permanent part of one worker's state, the same record as boltstore's (Redis increments
// AssignGeneration itself inside the transaction instead of reserving blocks).
type workerRec = store.WorkerRecord

type lockRec struct {
	AssignmentID  string    `json:"assignmentId"`
	IncarnationID string    `json:"incarnationId"`
	Until         time.Time `json:"until"`
}

// queueRec holds the per-incarnation queues and claims of one worker. It
// has no expiry of its own: entries whose assignment record expired are
// pruned when met.
type queueRec struct {
	Queues map[string][]string `json:"queues,omitempty"`
	Claims map[string]string   `json:"claims,omitempty"`
}

// asgRec is one assignment record. The lease token rides along so that
// whichever replica serves the lease can deliver it (the hub that minted it
// may be gone); it is dropped with the record at deadline + grace.
type asgRec struct {
	A          store.Assignment  `json:"a"`
	LeaseToken string            `json:"leaseToken,omitempty"`
	Acked      bool              `json:"acked,omitempty"`
	Cancelled  bool              `json:"cancelled,omitempty"`
	Finished   bool              `json:"finished,omitempty"`
	Settlement *store.Settlement `json:"settlement,omitempty"`
	GCAt       time.Time         `json:"gcAt"`
}

// Store is the Redis-backed store.Store.
type Store struct {
	rdb      *redis.Client
	prefix   string
	leaseTTL time.Duration
	nonceTTL time.Duration
	grace    time.Duration
	now      func() time.Time
	closed   atomic.Bool
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
	s, err := New(ctx, redis.NewClient(o), opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// New wraps a client; the store owns it and closes it on Close.
func New(ctx context.Context, rdb *redis.Client, opts ...Option) (*Store, error) {
	s := &Store{rdb: rdb, prefix: DefaultPrefix, leaseTTL: store.DefaultLeaseTTL, nonceTTL: store.DefaultNonceTTL,
		grace: store.DefaultGrace, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	// The epoch is when this keyspace was born. If Redis loses its data the
	// nonces go with it, so UseNonce re-creates the epoch and rejects every
	// proof dated before it (§7.4, fail closed).
	if err := epochScript.Run(ctx, rdb, []string{s.prefix + "epoch"}).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redisstore: connect: %w", err)
	}
	return s, nil
}

// Close releases the connection pool.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.rdb.Close()
}

// Keys. Per-worker keys share the hash tag {w:<id>} (§7.4).
func (s *Store) wkey(w, part string) string { return s.prefix + "{w:" + w + "}:" + part }
func (s *Store) akey(w, id string) string   { return s.wkey(w, "a:"+id) }
func (s *Store) ownerKey(id string) string  { return s.prefix + "asg:" + id }
func (s *Store) codeKey(h string) string    { return s.prefix + "code:" + h }
func (s *Store) workersKey() string         { return s.prefix + "workers" }
func (s *Store) changesChannel() string     { return s.prefix + "changes" }

func (s *Store) workerKeys(w string) []string {
	return []string{s.wkey(w, "rec"), s.wkey(w, "reg"), s.wkey(w, "ready"), s.wkey(w, "lock"), s.wkey(w, "q")}
}

func sessionKey(sid string) string { return bridge.HashSecret(sid) }

var epochScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], now, 'NX')
return 1`)

// nonceScript: KEYS[1] epoch, KEYS[2] nonce; ARGV[1] proof timestamp (ms),
// ARGV[2] TTL (ms). Returns 1 when the nonce is fresh and now recorded.
var nonceScript = redis.NewScript(`
local e = redis.call('GET', KEYS[1])
if not e then
  local t = redis.call('TIME')
  e = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', KEYS[1], e)
end
if tonumber(ARGV[1]) < tonumber(e) then return 0 end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 1 end
return 0`)

// pruneScript drops a worker from the index when its registration is gone,
// atomically so that a concurrent Register cannot be lost.
var pruneScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SREM', KEYS[2], ARGV[1]) end
return 1`)

// internalErr marks failures that must abort a transaction without writing.
type internalErr struct{ err error }

func (e internalErr) Error() string { return e.err.Error() }
func (e internalErr) Unwrap() error { return e.err }

// wtx is one worker transaction: the watched state, read once, and the
// writes the operation decided on.
type wtx struct {
	s   *Store
	ctx context.Context
	tx  *redis.Tx
	w   string
	now time.Time

	rec   *workerRec
	reg   *store.Registration
	ready string
	lock  *lockRec
	q     *queueRec
	asgs  map[string]*asgRec

	recDirty, regDirty, readyDirty, lockDirty, qDirty bool
	asgDirty                                          map[string]bool
	writes                                            []func(p redis.Pipeliner)
	publish                                           bool
}

func decode[T any](raw any, what string) (*T, error) {
	str, ok := raw.(string)
	if !ok || str == "" {
		return nil, nil
	}
	var v T
	if err := json.Unmarshal([]byte(str), &v); err != nil {
		return nil, internalErr{fmt.Errorf("%w: %s: %w", ErrCorrupt, what, err)}
	}
	return &v, nil
}

func (t *wtx) load() error {
	vals, err := t.tx.MGet(t.ctx, t.s.workerKeys(t.w)...).Result()
	if err != nil {
		return err
	}
	if t.rec, err = decode[workerRec](vals[0], "worker record"); err != nil {
		return err
	}
	if t.rec == nil {
		t.rec = &workerRec{WorkerID: t.w}
	}
	if t.reg, err = decode[store.Registration](vals[1], "registration"); err != nil {
		return err
	}
	if v, ok := vals[2].(string); ok {
		t.ready = v
	}
	if t.lock, err = decode[lockRec](vals[3], "lock"); err != nil {
		return err
	}
	if t.q, err = decode[queueRec](vals[4], "queues"); err != nil {
		return err
	}
	if t.q == nil {
		t.q = &queueRec{}
	}
	if t.q.Queues == nil {
		t.q.Queues = map[string][]string{}
	}
	if t.q.Claims == nil {
		t.q.Claims = map[string]string{}
	}
	return nil
}

// asg loads (and watches) one assignment record; nil when it is gone.
func (t *wtx) asg(id string) (*asgRec, error) {
	if a, ok := t.asgs[id]; ok {
		return a, nil
	}
	k := t.s.akey(t.w, id)
	if err := t.tx.Watch(t.ctx, k).Err(); err != nil {
		return nil, internalErr{err}
	}
	raw, err := t.tx.Get(t.ctx, k).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, internalErr{err}
	}
	a, err := decode[asgRec](raw, "assignment")
	if err != nil {
		return nil, err
	}
	if a != nil {
		a.A.LeaseToken = a.LeaseToken
	}
	t.asgs[id] = a
	return a, nil
}

func (t *wtx) putAsg(a *asgRec) {
	t.asgs[a.A.ID] = a
	t.asgDirty[a.A.ID] = true
}

// dropAsg deletes an assignment and every reference to it.
func (t *wtx) dropAsg(id string) {
	if a := t.asgs[id]; a != nil {
		inc := a.A.IncarnationID
		t.q.Queues[inc] = slices.DeleteFunc(t.q.Queues[inc], func(x string) bool { return x == id })
		if len(t.q.Queues[inc]) == 0 {
			delete(t.q.Queues, inc)
		}
		if t.q.Claims[inc] == id {
			delete(t.q.Claims, inc)
		}
		t.qDirty = true
	}
	t.asgs[id] = nil
	t.asgDirty[id] = true
	owner := t.s.ownerKey(id)
	t.writes = append(t.writes, func(p redis.Pipeliner) { p.Del(t.ctx, owner) })
}

// setTTL writes v with a lifetime ending at until, deleting the key when
// that moment has passed (go-redis treats a zero TTL as "no expiry").
func (t *wtx) setTTL(p redis.Pipeliner, key string, v any, until time.Time) error {
	ttl := until.Sub(t.now)
	if ttl < time.Millisecond {
		p.Del(t.ctx, key)
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	p.Set(t.ctx, key, b, ttl)
	return nil
}

func (t *wtx) dirty() bool {
	return t.recDirty || t.regDirty || t.readyDirty || t.lockDirty || t.qDirty || len(t.asgDirty) > 0 || len(t.writes) > 0 || t.publish
}

func (t *wtx) commit() error {
	if !t.dirty() {
		return nil
	}
	var merr error
	_, err := t.tx.TxPipelined(t.ctx, func(p redis.Pipeliner) error {
		set := func(key string, v any) {
			b, err := json.Marshal(v)
			if err != nil {
				merr = err
				return
			}
			p.Set(t.ctx, key, b, 0)
		}
		if t.recDirty {
			set(t.s.wkey(t.w, "rec"), t.rec)
		}
		if t.regDirty {
			if t.reg == nil {
				p.Del(t.ctx, t.s.wkey(t.w, "reg"))
			} else if err := t.setTTL(p, t.s.wkey(t.w, "reg"), t.reg, t.reg.ExpiresAt); err != nil {
				merr = err
			}
		}
		if t.readyDirty {
			if t.ready == "" {
				p.Del(t.ctx, t.s.wkey(t.w, "ready"))
			} else {
				p.Set(t.ctx, t.s.wkey(t.w, "ready"), t.ready, store.ReadyTTL(t.s.leaseTTL))
			}
		}
		if t.lockDirty {
			if t.lock == nil {
				p.Del(t.ctx, t.s.wkey(t.w, "lock"))
			} else if err := t.setTTL(p, t.s.wkey(t.w, "lock"), t.lock, t.lock.Until); err != nil {
				merr = err
			}
		}
		if t.qDirty {
			if len(t.q.Queues) == 0 && len(t.q.Claims) == 0 {
				p.Del(t.ctx, t.s.wkey(t.w, "q"))
			} else {
				set(t.s.wkey(t.w, "q"), t.q)
			}
		}
		for id := range t.asgDirty {
			a := t.asgs[id]
			if a == nil {
				p.Del(t.ctx, t.s.akey(t.w, id))
				continue
			}
			a.LeaseToken = a.A.LeaseToken
			if err := t.setTTL(p, t.s.akey(t.w, id), a, a.GCAt); err != nil {
				merr = err
			}
		}
		for _, f := range t.writes {
			f(p)
		}
		if t.publish {
			p.Publish(t.ctx, t.s.changesChannel(), t.w)
		}
		if merr != nil {
			return internalErr{merr}
		}
		return nil
	})
	return err
}

// update runs fn as one atomic step on worker w, retrying when a concurrent
// writer touched a watched key. Writes fn queued are committed even when fn
// returns a protocol error (a burned pairing code is such a write); an
// internal error aborts without writing.
func (s *Store) update(ctx context.Context, w string, extra []string, fn func(t *wtx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	keys := append(s.workerKeys(w), extra...)
	for attempt := range maxAttempts {
		var fnErr error
		err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			t := &wtx{s: s, ctx: ctx, tx: tx, w: w, now: s.now(), asgs: map[string]*asgRec{}, asgDirty: map[string]bool{}}
			if err := t.load(); err != nil {
				return err
			}
			fnErr = fn(t)
			var ie internalErr
			if errors.As(fnErr, &ie) {
				return fnErr
			}
			return t.commit()
		}, keys...)
		if errors.Is(err, redis.TxFailedErr) {
			// Lost the race; back off a little, randomised so that two
			// replicas do not retry in lockstep.
			d := time.Duration(rand.IntN(1+min(attempt, 10))) * time.Millisecond
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		if err != nil {
			var ie internalErr
			if errors.As(err, &ie) {
				return fmt.Errorf("redisstore: %w", ie.err)
			}
			if s.closed.Load() {
				return ErrClosed
			}
			return fmt.Errorf("redisstore: %w", err)
		}
		return fnErr
	}
	return ErrContention
}

// get reads one key outside a transaction ("" when absent).
func (s *Store) get(ctx context.Context, key string) (string, error) {
	if s.closed.Load() {
		return "", ErrClosed
	}
	v, err := s.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("redisstore: %w", err)
	}
	return v, nil
}

// CreatePairing implements store.Store.
func (s *Store) CreatePairing(ctx context.Context, workerID, codeHash string, binding *bridge.Binding, expiresAt time.Time) error {
	return s.update(ctx, workerID, nil, func(t *wtx) error {
		rec := t.rec
		if old := rec.PendingCode; old != "" {
			k := s.codeKey(old)
			t.writes = append(t.writes, func(p redis.Pipeliner) { p.Del(ctx, k) })
		}
		rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = codeHash, expiresAt, binding, rec.PairingGeneration
		t.recDirty = true
		k, ttl := s.codeKey(codeHash), expiresAt.Sub(t.now)
		if ttl >= time.Millisecond {
			t.writes = append(t.writes, func(p redis.Pipeliner) { p.Set(ctx, k, workerID, ttl) })
		}
		return nil
	})
}

// RedeemPairing implements store.Store.
func (s *Store) RedeemPairing(ctx context.Context, p store.RedeemParams) (string, error) {
	ck := s.codeKey(p.CodeHash)
	owner, err := s.get(ctx, ck)
	if err != nil {
		return "", err
	}
	if owner == "" {
		return "", bridge.ErrPairingInvalid
	}
	var identity string
	err = s.update(ctx, owner, []string{ck}, func(t *wtx) error {
		if cur, err := t.tx.Get(ctx, ck).Result(); err != nil || cur != owner {
			if err != nil && !errors.Is(err, redis.Nil) {
				return internalErr{err}
			}
			return bridge.ErrPairingInvalid
		}
		rec := t.rec
		burn := func(e error) error {
			if rec.PendingCode == p.CodeHash {
				rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = "", time.Time{}, nil, 0
				t.recDirty = true
			}
			t.writes = append(t.writes, func(pp redis.Pipeliner) { pp.Del(ctx, ck) })
			return e
		}
		if rec.PendingCode != p.CodeHash || !t.now.Before(rec.PendingExpires) || rec.PendingGen != rec.PairingGeneration {
			return burn(bridge.ErrPairingInvalid)
		}
		if owner != p.WorkerID {
			return burn(bridge.ErrPairingInvalid)
		}
		if !p.PublicKeyValid {
			return burn(bridge.ErrPublicKeyInvalid)
		}
		identity = bridge.NewID()
		rec.IdentityID = identity
		rec.PublicKey = p.PublicKey
		rec.Binding = rec.PendingBinding
		rec.CredentialHash, rec.CredentialExpires = p.CredentialHash, p.ExpiresAt
		_ = burn(nil)
		return nil
	})
	if err != nil {
		return "", err
	}
	return identity, nil
}

// Revoke implements store.Store.
func (s *Store) Revoke(ctx context.Context, workerID string) error {
	return s.update(ctx, workerID, nil, func(t *wtx) error {
		rec := t.rec
		if old := rec.PendingCode; old != "" {
			k := s.codeKey(old)
			t.writes = append(t.writes, func(p redis.Pipeliner) { p.Del(ctx, k) })
		}
		rec.PairingGeneration++
		rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = "", time.Time{}, nil, 0
		rec.IdentityID, rec.PublicKey, rec.Binding, rec.CredentialHash, rec.CredentialExpires = "", "", nil, "", time.Time{}
		t.recDirty = true
		// A revoked worker is no longer dispatchable.
		t.reg, t.regDirty = nil, true
		t.publish = true
		return nil
	})
}

func (s *Store) record(ctx context.Context, workerID string) (*workerRec, error) {
	raw, err := s.get(ctx, s.wkey(workerID, "rec"))
	if err != nil {
		return nil, err
	}
	rec, err := decode[workerRec](raw, "worker record")
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return rec, nil
}

// Credential implements store.Store.
func (s *Store) Credential(ctx context.Context, workerID, credentialHash string) (*store.Credential, error) {
	rec, err := s.record(ctx, workerID)
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.CredentialHash == "" || rec.CredentialHash != credentialHash || !s.now().Before(rec.CredentialExpires) {
		return nil, bridge.ErrCredentialInvalid
	}
	return &store.Credential{
		WorkerID: workerID, IdentityID: rec.IdentityID, PublicKey: rec.PublicKey, ExpiresAt: rec.CredentialExpires,
		Binding: rec.Binding, PairingGeneration: rec.PairingGeneration,
	}, nil
}

// RefreshCredential implements store.Store.
func (s *Store) RefreshCredential(ctx context.Context, workerID, oldHash, newHash string, expiresAt time.Time) error {
	return s.update(ctx, workerID, nil, func(t *wtx) error {
		rec := t.rec
		if rec.CredentialHash == "" || rec.CredentialHash != oldHash || !t.now.Before(rec.CredentialExpires) {
			return bridge.ErrCredentialInvalid
		}
		rec.CredentialHash, rec.CredentialExpires = newHash, expiresAt
		t.recDirty = true
		return nil
	})
}

// UseNonce implements store.Store: SET NX PX under the credential, and a
// replay for proofs older than the keyspace (see New).
func (s *Store) UseNonce(ctx context.Context, credentialHash, nonceHash string, timestamp time.Time) error {
	if s.closed.Load() {
		return ErrClosed
	}
	ttl := max(s.nonceTTL.Milliseconds(), 1)
	ok, err := nonceScript.Run(ctx, s.rdb, []string{s.prefix + "epoch", s.prefix + "nonce:" + credentialHash + ":" + nonceHash},
		timestamp.UnixMilli(), ttl).Int()
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if ok != 1 {
		return bridge.ErrProofReplayed
	}
	return nil
}

func readyMark(inc string, gen int64) string { return inc + ":" + strconv.FormatInt(gen, 10) }

func (t *wtx) isReady() bool {
	if t.reg == nil {
		return false
	}
	if !t.reg.Capabilities.RequiresReadyConfirmation {
		return true
	}
	return t.ready == readyMark(t.reg.IncarnationID, t.reg.Generation)
}

// Register implements store.Store (§7.2).
func (s *Store) Register(ctx context.Context, p store.RegisterParams) (*store.Registration, error) {
	var out store.Registration
	err := s.update(ctx, p.WorkerID, nil, func(t *wtx) error {
		rec := t.rec
		// 1. A revoke or re-pairing raced this request.
		if p.Auth.CredentialHash != "" {
			if rec.PairingGeneration != p.Auth.PairingGeneration || rec.CredentialHash != p.Auth.CredentialHash {
				return bridge.ErrWorkerFenced
			}
			if rec.IdentityID != p.Auth.IdentityID {
				return bridge.ErrWorkerUnauthorized
			}
		}
		inc := p.IncarnationID
		// 2. This incarnation's own marks.
		if _, q := rec.Quarantined[inc]; q {
			return bridge.ErrWorkerQuarantined
		}
		if _, f := rec.Fenced[inc]; f {
			return bridge.ErrWorkerFenced
		}
		// 3. One active incarnation.
		if t.lock != nil {
			if (t.reg != nil && t.reg.IncarnationID != inc) || (t.reg == nil && t.lock.IncarnationID != inc) {
				return bridge.ErrWorkerBusy
			}
		}
		changed := false
		if rec.RegOwner != "" && rec.RegOwner != inc {
			if rec.Fenced == nil {
				rec.Fenced = map[string]time.Time{}
			}
			rec.Fenced[rec.RegOwner] = t.now
			for k, ft := range rec.Fenced {
				if t.now.Sub(ft) > store.DefaultFenceRetention {
					delete(rec.Fenced, k)
				}
			}
			changed = true
		}
		// 4. Generation.
		if rec.RegOwner != inc {
			rec.RegGeneration++
			rec.RegOwner = inc
			changed = true
		}
		if changed {
			t.recDirty = true
			// Work queued for a fenced incarnation can never be leased (a
			// queued item is by construction neither acked nor settled).
			for qi := range t.q.Queues {
				if qi != inc {
					delete(t.q.Queues, qi)
					t.qDirty = true
				}
			}
			if t.ready != "" {
				t.ready, t.readyDirty = "", true
			}
		}
		// 5. Store the registration.
		t.reg = &store.Registration{
			WorkerID: p.WorkerID, IncarnationID: inc, Generation: rec.RegGeneration, RegisteredAt: t.now,
			ExpiresAt: t.now.Add(s.leaseTTL), LeaseTTL: s.leaseTTL, Capabilities: p.Capabilities,
			CapabilitiesJSON: slices.Clone(p.CapabilitiesJSON), IdentityID: p.Auth.IdentityID, Binding: p.Auth.Binding,
		}
		t.regDirty = true
		t.publish = changed
		out = *t.reg
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The index only lists candidates; Workers checks each registration.
	if err := s.rdb.SAdd(ctx, s.workersKey(), p.WorkerID).Err(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return &out, nil
}

// Ready implements store.Store (§3.4).
func (s *Store) Ready(ctx context.Context, workerID, incarnationID string, gen int64) error {
	return s.update(ctx, workerID, nil, func(t *wtx) error {
		if _, q := t.rec.Quarantined[incarnationID]; q {
			return bridge.ErrWorkerQuarantined
		}
		if _, f := t.rec.Fenced[incarnationID]; f {
			return bridge.ErrWorkerFenced
		}
		if t.reg == nil {
			return bridge.ErrWorkerOffline
		}
		if t.reg.IncarnationID != incarnationID || t.reg.Generation != gen {
			return bridge.ErrWorkerFenced
		}
		t.ready, t.readyDirty, t.publish = readyMark(incarnationID, gen), true, true
		return nil
	})
}

// Worker implements store.Store.
func (s *Store) Worker(ctx context.Context, workerID string) (*store.WorkerState, error) {
	sts, err := s.states(ctx, []string{workerID})
	if err != nil {
		return nil, err
	}
	return &sts[0], nil
}

// states reads several workers' snapshots, each with one MGET (atomic).
func (s *Store) states(ctx context.Context, ids []string) ([]store.WorkerState, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, w := range ids {
		cmds[i] = pipe.MGet(ctx, s.wkey(w, "rec"), s.wkey(w, "reg"), s.wkey(w, "ready"), s.wkey(w, "lock"))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	out := make([]store.WorkerState, len(ids))
	for i, w := range ids {
		vals := cmds[i].Val()
		rec, err := decode[workerRec](vals[0], "worker record")
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		reg, err := decode[store.Registration](vals[1], "registration")
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		t := &wtx{reg: reg}
		t.ready, _ = vals[2].(string)
		st := store.WorkerState{WorkerID: w, Online: reg != nil, Ready: t.isReady(), Busy: vals[3] != nil, Registration: reg}
		if rec != nil {
			st.Binding = rec.Binding
		}
		out[i] = st
	}
	return out, nil
}

// Workers implements store.Store: every worker with a live registration.
func (s *Store) Workers(ctx context.Context) ([]store.WorkerState, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	ids, err := s.rdb.SMembers(ctx, s.workersKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	sort.Strings(ids)
	all, err := s.states(ctx, ids)
	if err != nil {
		return nil, err
	}
	var out []store.WorkerState
	for _, st := range all {
		if st.Online {
			out = append(out, st)
			continue
		}
		// Keep the index small: drop workers whose registration expired.
		_ = pruneScript.Run(ctx, s.rdb, []string{s.wkey(st.WorkerID, "reg"), s.workersKey()}, st.WorkerID).Err()
	}
	return out, nil
}

// Enqueue implements store.Store (§7.3 dispatch steps 1–3).
func (s *Store) Enqueue(ctx context.Context, p store.EnqueueParams) (*store.Assignment, error) {
	var out store.Assignment
	ok := s.ownerKey(p.AssignmentID)
	err := s.update(ctx, p.WorkerID, []string{ok}, func(t *wtx) error {
		if !t.isReady() {
			return bridge.ErrWorkerOffline
		}
		rec := t.rec
		if p.RuntimeSessionID != "" && !t.reg.Capabilities.StatefulWorkspace {
			return bridge.ErrWorkerMismatch
		}
		if p.RuntimeSessionID != "" && rec.WorkspaceFences[sessionKey(p.RuntimeSessionID)] != "" {
			return bridge.ErrWorkspaceQuarantined
		}
		if t.lock != nil {
			return bridge.ErrWorkerBusy
		}
		if n, err := t.tx.Exists(ctx, ok).Result(); err != nil {
			return internalErr{err}
		} else if n > 0 {
			return bridge.ErrAssignmentInvalid
		}
		rec.AssignGeneration++
		if p.RuntimeSessionID != "" {
			if rec.WorkspaceFences == nil {
				rec.WorkspaceFences = map[string]string{}
			}
			rec.WorkspaceFences[sessionKey(p.RuntimeSessionID)] = p.AssignmentID
		}
		t.recDirty = true
		inc := t.reg.IncarnationID
		a := store.Assignment{
			ID: p.AssignmentID, WorkerID: p.WorkerID, IncarnationID: inc, Generation: rec.AssignGeneration,
			LeaseToken: p.LeaseToken, LeaseTokenHash: p.LeaseTokenHash, IdentityID: t.reg.IdentityID, ExpiresAt: p.ExpiresAt,
			RuntimeSessionID: p.RuntimeSessionID, ExecutionKind: p.ExecutionKind, Request: slices.Clone(p.Request),
		}
		gc := p.ExpiresAt.Add(s.grace)
		t.lock, t.lockDirty = &lockRec{AssignmentID: a.ID, IncarnationID: inc, Until: gc}, true
		t.q.Queues[inc] = append(t.q.Queues[inc], a.ID)
		t.qDirty = true
		t.putAsg(&asgRec{A: a, GCAt: gc})
		if ttl := gc.Sub(t.now); ttl >= time.Millisecond {
			t.writes = append(t.writes, func(pp redis.Pipeliner) { pp.Set(ctx, ok, p.WorkerID, ttl) })
		}
		t.publish = true
		out = a
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

func (t *wtx) clearFenceIfNamed(a *store.Assignment) bool {
	if a.RuntimeSessionID == "" {
		return false
	}
	k := sessionKey(a.RuntimeSessionID)
	if t.rec.WorkspaceFences[k] != a.ID {
		return false
	}
	delete(t.rec.WorkspaceFences, k)
	t.recDirty = true
	return true
}

// Lease implements store.Store (§7.3 lease).
func (s *Store) Lease(ctx context.Context, workerID, incarnationID, identityID string) (*store.Assignment, error) {
	// Fast path for the common empty poll (every waiting worker, every poll
	// tick, on every replica): one atomic MGET instead of a transaction.
	if empty, err := s.leaseEmpty(ctx, workerID, incarnationID); err != nil || empty {
		return nil, err
	}
	var out *store.Assignment
	err := s.update(ctx, workerID, nil, func(t *wtx) error {
		out = nil
		rec := t.rec
		if _, f := rec.Fenced[incarnationID]; f {
			return bridge.ErrWorkerFenced
		}
		if rec.RegOwner != "" && rec.RegOwner != incarnationID {
			return bridge.ErrWorkerFenced
		}
		for {
			id, claimed := t.q.Claims[incarnationID]
			if !claimed {
				q := t.q.Queues[incarnationID]
				if len(q) == 0 {
					return nil
				}
				id = q[0]
				if len(q) == 1 {
					delete(t.q.Queues, incarnationID)
				} else {
					t.q.Queues[incarnationID] = q[1:]
				}
				t.q.Claims[incarnationID] = id
				t.qDirty = true
			}
			a, err := t.asg(id)
			if err != nil {
				return err
			}
			if a == nil || a.A.WorkerID != workerID || a.A.IncarnationID != incarnationID ||
				(identityID != "" && a.A.IdentityID != identityID) || a.Finished || a.Settlement != nil {
				delete(t.q.Claims, incarnationID)
				t.qDirty = true
				continue
			}
			if !t.now.Before(a.A.ExpiresAt) {
				delete(t.q.Claims, incarnationID)
				t.qDirty = true
				if !a.Acked {
					t.clearFenceIfNamed(&a.A)
				}
				continue
			}
			o := a.A
			out = &o
			return nil
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// leaseEmpty reports, from one snapshot, that the incarnation has neither a
// claim nor queued work; fencing is checked on the same snapshot.
func (s *Store) leaseEmpty(ctx context.Context, workerID, incarnationID string) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	vals, err := s.rdb.MGet(ctx, s.wkey(workerID, "rec"), s.wkey(workerID, "q")).Result()
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	rec, err := decode[workerRec](vals[0], "worker record")
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	if rec != nil {
		if _, f := rec.Fenced[incarnationID]; f || (rec.RegOwner != "" && rec.RegOwner != incarnationID) {
			return false, bridge.ErrWorkerFenced
		}
	}
	q, err := decode[queueRec](vals[1], "queues")
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	if q == nil {
		return true, nil
	}
	_, claimed := q.Claims[incarnationID]
	return !claimed && len(q.Queues[incarnationID]) == 0, nil
}

// Ack implements store.Store (§3.6).
func (s *Store) Ack(ctx context.Context, p store.AckParams) error {
	return s.update(ctx, p.WorkerID, nil, func(t *wtx) error {
		a, err := t.asg(p.AssignmentID)
		if err != nil {
			return err
		}
		if a == nil || a.Finished || a.A.IncarnationID != p.IncarnationID || t.rec.RegOwner != p.IncarnationID ||
			a.A.Generation != p.Generation || a.A.LeaseTokenHash != p.LeaseTokenHash || t.q.Claims[p.IncarnationID] != p.AssignmentID {
			return bridge.ErrAssignmentFenced
		}
		if !a.Acked {
			a.Acked = true
			t.putAsg(a)
		}
		return nil
	})
}

// Cancelled implements store.Store.
func (s *Store) Cancelled(ctx context.Context, workerID, incarnationID, assignmentID string) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	vals, err := s.rdb.MGet(ctx, s.wkey(workerID, "rec"), s.akey(workerID, assignmentID)).Result()
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	rec, err := decode[workerRec](vals[0], "worker record")
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	a, err := decode[asgRec](vals[1], "assignment")
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	if rec == nil || a == nil || a.A.IncarnationID != incarnationID || rec.RegOwner != incarnationID || a.Cancelled {
		return true, nil
	}
	return false, nil
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, workerID, assignmentID string) error {
	return s.update(ctx, workerID, nil, func(t *wtx) error {
		a, err := t.asg(assignmentID)
		if err != nil || a == nil || a.Cancelled {
			return err
		}
		a.Cancelled = true
		t.putAsg(a)
		return nil
	})
}

// Settle implements store.Store (§7.3 settle).
func (s *Store) Settle(ctx context.Context, p store.SettleParams) error {
	ok := s.ownerKey(p.AssignmentID)
	owner, err := s.get(ctx, ok)
	if err != nil {
		return err
	}
	if owner == "" {
		return bridge.ErrAssignmentNotFound
	}
	return s.update(ctx, owner, []string{ok}, func(t *wtx) error {
		a, err := t.asg(p.AssignmentID)
		if err != nil {
			return err
		}
		if a == nil {
			return bridge.ErrAssignmentNotFound
		}
		// 1. Idempotency on the canonical bytes.
		if a.Settlement != nil {
			if string(a.Settlement.Canonical) == string(p.Canonical) {
				return nil
			}
			return bridge.ErrAssignmentFenced
		}
		// 3. Another worker's assignment.
		if owner != p.WorkerID {
			return bridge.ErrWorkerMismatch
		}
		rec := t.rec
		// 4. Fencing fields.
		if a.A.IncarnationID != p.IncarnationID || rec.RegOwner != p.IncarnationID || a.A.Generation != p.Generation ||
			a.A.LeaseTokenHash != p.LeaseTokenHash || (p.IdentityID != "" && a.A.IdentityID != p.IdentityID) {
			return bridge.ErrAssignmentFenced
		}
		// 5. Deadline.
		if p.Status == bridge.StatusFulfilled && !t.now.Before(a.A.ExpiresAt) {
			return bridge.ErrAssignmentExpired
		}
		// 6. Workspace fence of a stateful assignment.
		if sid := a.A.RuntimeSessionID; sid != "" {
			if rec.WorkspaceFences[sessionKey(sid)] != a.A.ID {
				return bridge.ErrWorkspaceQuarantined
			}
			if p.Status == bridge.StatusRejected {
				t.clearFenceIfNamed(&a.A)
			}
		}
		// 7. Store.
		a.Settlement = &store.Settlement{Status: p.Status, Canonical: slices.Clone(p.Canonical)}
		if t.q.Claims[p.IncarnationID] == a.A.ID {
			delete(t.q.Claims, p.IncarnationID)
			t.qDirty = true
		}
		a.Acked = false
		t.putAsg(a)
		if a.Finished && t.lock != nil && t.lock.AssignmentID == a.A.ID {
			// The dispatcher gave up already; a late settlement frees the worker.
			t.lock, t.lockDirty = nil, true
		}
		t.publish = true
		return nil
	})
}

// Settlement implements store.Store.
func (s *Store) Settlement(ctx context.Context, workerID, assignmentID string) (*store.Settlement, error) {
	raw, err := s.get(ctx, s.akey(workerID, assignmentID))
	if err != nil {
		return nil, err
	}
	a, err := decode[asgRec](raw, "assignment")
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if a == nil || a.Settlement == nil {
		return nil, nil
	}
	return a.Settlement, nil
}

// Complete implements store.Store (§7.3 dispatch steps 4, 6 and 7). The
// whole step is one transaction, so if it cannot be written the fence
// stays and the session remains quarantined (§10.3, fail closed).
func (s *Store) Complete(ctx context.Context, workerID, assignmentID string) (*store.Settlement, error) {
	var out *store.Settlement
	err := s.update(ctx, workerID, nil, func(t *wtx) error {
		out = nil
		a, err := t.asg(assignmentID)
		if err != nil {
			return err
		}
		if a == nil || a.Finished {
			return bridge.ErrAssignmentExpired
		}
		a.Finished = true
		t.putAsg(a)
		inc := a.A.IncarnationID
		if q := t.q.Queues[inc]; slices.Contains(q, assignmentID) {
			t.q.Queues[inc] = slices.DeleteFunc(q, func(x string) bool { return x == assignmentID })
			if len(t.q.Queues[inc]) == 0 {
				delete(t.q.Queues, inc)
			}
			t.qDirty = true
		}
		releaseLock := func() {
			if t.lock != nil && t.lock.AssignmentID == assignmentID {
				t.lock, t.lockDirty = nil, true
			}
		}
		t.publish = true
		if a.Settlement != nil {
			st := *a.Settlement
			out = &st
			releaseLock()
			// The record stays until deadline + grace so that a resent
			// settlement still gets its idempotent 200.
			if st.Status == bridge.StatusFulfilled && a.A.RuntimeSessionID != "" && !t.clearFenceIfNamed(&a.A) {
				return bridge.ErrWorkspaceQuarantined
			}
			return nil
		}
		// Expired without a settlement.
		a.Cancelled = true
		if t.q.Claims[inc] == assignmentID && !a.Acked {
			delete(t.q.Claims, inc)
			t.qDirty = true
		}
		if a.Acked {
			// Acked but never settled: the worker may still be running it,
			// so the fence and the lock stay until they expire.
			return bridge.ErrAssignmentExpired
		}
		t.clearFenceIfNamed(&a.A)
		releaseLock()
		t.dropAsg(assignmentID)
		return bridge.ErrAssignmentExpired
	})
	if err != nil && !errors.Is(err, bridge.ErrWorkspaceQuarantined) {
		return nil, err
	}
	return out, err
}

// Withdraw implements store.Store.
func (s *Store) Withdraw(ctx context.Context, workerID, assignmentID string) error {
	return s.update(ctx, workerID, nil, func(t *wtx) error {
		a, err := t.asg(assignmentID)
		if err != nil {
			return err
		}
		if a == nil || a.Finished {
			return bridge.ErrAssignmentNotFound
		}
		if a.Acked || a.Settlement != nil {
			return bridge.ErrAssignmentFenced
		}
		t.clearFenceIfNamed(&a.A)
		if t.lock != nil && t.lock.AssignmentID == assignmentID {
			t.lock, t.lockDirty = nil, true
		}
		t.dropAsg(assignmentID)
		t.publish = true
		return nil
	})
}

// ResetWorkspace implements store.Store (§3.7).
func (s *Store) ResetWorkspace(ctx context.Context, workerID, incarnationID, runtimeSessionID string) error {
	return s.update(ctx, workerID, nil, func(t *wtx) error {
		if _, f := t.rec.Fenced[incarnationID]; f || t.rec.RegOwner != incarnationID {
			return bridge.ErrWorkerFenced
		}
		if t.lock != nil {
			return bridge.ErrWorkerBusy
		}
		k := sessionKey(runtimeSessionID)
		if _, ok := t.rec.WorkspaceFences[k]; !ok {
			return nil
		}
		delete(t.rec.WorkspaceFences, k)
		t.recDirty, t.publish = true, true
		return nil
	})
}

// WatchChanges calls fn whenever any replica changes dispatchable state
// (work queued, settled, completed, a worker registered or became ready),
// until ctx ends. A hub passes its wake-up function, so a long poll on this
// replica answers at once when another replica queues work. fn is also
// called after a reconnect, since messages sent meanwhile were lost.
func (s *Store) WatchChanges(ctx context.Context, fn func()) error {
	if s.closed.Load() {
		return ErrClosed
	}
	ps := s.rdb.Subscribe(ctx, s.changesChannel())
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
		if ctx.Err() != nil || s.closed.Load() {
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
			fn()
		case *redis.Subscription:
			if failed && strings.EqualFold(m.Kind, "subscribe") {
				failed = false
				fn()
			}
		}
	}
}
