// Package boltstore is the hub's embedded, single-node store (spec §7.4):
// identities, credentials, pairing codes, generations, counters, fence and
// quarantine marks and workspace fences persist in a bbolt file; queues,
// claims, locks, registrations and nonces live in memory, so after a restart
// in-flight work ends ASSIGNMENT_EXPIRED and proofs dated before the store
// was opened are rejected as replays. bbolt's file lock admits one process,
// which is what makes the in-memory half safe.
package boltstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

var (
	bucketWorkers = []byte("workers")
	bucketCodes   = []byte("codes")
)

// generationBlock is how many assignment generations one persisted
// reservation covers.
const generationBlock = 1024

// ErrClosed is returned by every operation after Close.
var ErrClosed = errors.New("boltstore: store is closed")

// Option configures a Store.
type Option func(*Store)

// WithLeaseTTL sets the registration lifetime (default 60 s).
func WithLeaseTTL(d time.Duration) Option { return func(s *Store) { s.leaseTTL = d } }

// WithNonceTTL sets how long a nonce is remembered (default 120 s).
func WithNonceTTL(d time.Duration) Option { return func(s *Store) { s.nonceTTL = d } }

// WithGrace sets how long records outlive an assignment deadline (default 30 s).
func WithGrace(d time.Duration) Option { return func(s *Store) { s.grace = d } }

// WithLockTimeout bounds the wait for another process's file lock (default 2 s).
func WithLockTimeout(d time.Duration) Option { return func(s *Store) { s.lockTimeout = d } }

// WithClock replaces time.Now (tests of expiry).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// workerRec is the persistent part of one worker's state, shared with the Redis store.
type workerRec = store.WorkerRecord

type lockRec struct {
	assignmentID  string
	incarnationID string
	until         time.Time
}

type asgRec struct {
	a          store.Assignment
	delivered  bool
	acked      bool
	cancelled  bool
	finished   bool // the dispatcher completed; kept only for late settles
	settlement *store.Settlement
	gcAt       time.Time
}

// live is the in-memory part of one worker's state.
type live struct {
	reg        *store.Registration
	readyMark  string
	readyUntil time.Time
	lock       *lockRec
	queues     map[string][]string // incarnation → assignment IDs
	claims     map[string]string   // incarnation → assignment ID
	asg        map[string]*asgRec
	nextGC     time.Time // earliest gcAt in asg; zero when asg is empty
}

// Store is the bbolt-backed store.Store.
type Store struct {
	db       *bolt.DB
	leaseTTL time.Duration
	nonceTTL time.Duration
	grace    time.Duration
	now      func() time.Time
	openedAt time.Time

	lockTimeout time.Duration

	mu       sync.Mutex
	closed   bool
	workers  map[string]*workerRec
	codes    map[string]string // code hash → worker ID
	lives    map[string]*live
	asgOwner map[string]string // assignment ID → worker ID
	issued   map[string]int64  // worker ID → last issued assignment generation
	// Nonces live in two generations rotated every nonceTTL, so each is
	// remembered for between one and two TTLs at O(1) cost per request.
	nonces     map[string]struct{}
	oldNonces  map[string]struct{}
	nonceEpoch time.Time
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store file at path with mode 0600.
func Open(path string, opts ...Option) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("boltstore: %w", err)
	}
	s := &Store{
		lockTimeout: 2 * time.Second, leaseTTL: store.DefaultLeaseTTL, nonceTTL: store.DefaultNonceTTL, grace: store.DefaultGrace,
		now: time.Now, workers: map[string]*workerRec{}, codes: map[string]string{},
		lives: map[string]*live{}, asgOwner: map[string]string{}, issued: map[string]int64{}, nonces: map[string]struct{}{},
	}
	for _, o := range opts {
		o(s)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: s.lockTimeout})
	if err != nil {
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	_ = os.Chmod(path, 0o600)
	s.db = db
	s.openedAt = s.now()
	s.nonceEpoch = s.openedAt
	err = db.Update(func(tx *bolt.Tx) error {
		wb, err := tx.CreateBucketIfNotExists(bucketWorkers)
		if err != nil {
			return err
		}
		cb, err := tx.CreateBucketIfNotExists(bucketCodes)
		if err != nil {
			return err
		}
		if err := wb.ForEach(func(k, v []byte) error {
			var r workerRec
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("worker %q: %w", k, err)
			}
			s.workers[string(k)] = &r
			s.issued[string(k)] = r.AssignGeneration
			return nil
		}); err != nil {
			return err
		}
		return cb.ForEach(func(k, v []byte) error {
			s.codes[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: load: %w", err)
	}
	return s, nil
}

// Close releases the file lock.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.db.Close()
}

// begin takes the lock and checks the context and closed state.
func (s *Store) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// save persists a worker record (and optionally code index changes) before
// it becomes visible in memory, so a failed write changes nothing.
func (s *Store) save(rec *workerRec, putCodes map[string]string, delCodes []string) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketWorkers).Put([]byte(rec.WorkerID), data); err != nil {
			return err
		}
		cb := tx.Bucket(bucketCodes)
		for _, h := range delCodes {
			if err := cb.Delete([]byte(h)); err != nil {
				return err
			}
		}
		for h, w := range putCodes {
			if err := cb.Put([]byte(h), []byte(w)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("boltstore: persist: %w", err)
	}
	s.workers[rec.WorkerID] = rec
	for _, h := range delCodes {
		delete(s.codes, h)
	}
	for h, w := range putCodes {
		s.codes[h] = w
	}
	return nil
}

func (s *Store) record(workerID string) *workerRec {
	if r, ok := s.workers[workerID]; ok {
		return r.Clone()
	}
	return &workerRec{WorkerID: workerID}
}

func (s *Store) live(workerID string) *live {
	l, ok := s.lives[workerID]
	if !ok {
		l = &live{queues: map[string][]string{}, claims: map[string]string{}, asg: map[string]*asgRec{}}
		s.lives[workerID] = l
	}
	s.sweep(l)
	return l
}

// sweep drops expired in-memory records of one worker.
func (s *Store) sweep(l *live) {
	now := s.now()
	if l.reg != nil && !now.Before(l.reg.ExpiresAt) {
		l.reg = nil
	}
	if l.readyMark != "" && !now.Before(l.readyUntil) {
		l.readyMark = ""
	}
	if l.lock != nil && !now.Before(l.lock.until) {
		l.lock = nil
	}
	// Records are scanned only when the earliest one is due, so a busy
	// worker's kept settlements do not make every operation O(n).
	if l.nextGC.IsZero() || now.Before(l.nextGC) {
		return
	}
	l.nextGC = time.Time{}
	for id, a := range l.asg {
		if !now.Before(a.gcAt) {
			s.dropAssignment(l, id)
		} else if l.nextGC.IsZero() || a.gcAt.Before(l.nextGC) {
			l.nextGC = a.gcAt
		}
	}
}

func (s *Store) dropAssignment(l *live, id string) {
	a, ok := l.asg[id]
	if !ok {
		return
	}
	inc := a.a.IncarnationID
	l.queues[inc] = slices.DeleteFunc(l.queues[inc], func(x string) bool { return x == id })
	if len(l.queues[inc]) == 0 {
		delete(l.queues, inc)
	}
	if l.claims[inc] == id {
		delete(l.claims, inc)
	}
	delete(l.asg, id)
	delete(s.asgOwner, id)
}

func sessionKey(sid string) string { return bridge.HashSecret(sid) }

// CreatePairing implements store.Store.
func (s *Store) CreatePairing(ctx context.Context, workerID, codeHash string, binding *bridge.Binding, expiresAt time.Time) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec := s.record(workerID)
	var del []string
	if rec.PendingCode != "" {
		del = append(del, rec.PendingCode)
	}
	rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = codeHash, expiresAt, binding, rec.PairingGeneration
	return s.save(rec, map[string]string{codeHash: workerID}, del)
}

// RedeemPairing implements store.Store.
func (s *Store) RedeemPairing(ctx context.Context, p store.RedeemParams) (string, error) {
	if err := s.begin(ctx); err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	owner, ok := s.codes[p.CodeHash]
	if !ok {
		return "", bridge.ErrPairingInvalid
	}
	rec := s.record(owner)
	burn := func(e error) (string, error) {
		if rec.PendingCode == p.CodeHash {
			rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = "", time.Time{}, nil, 0
		}
		if err := s.save(rec, nil, []string{p.CodeHash}); err != nil {
			return "", err
		}
		return "", e
	}
	if rec.PendingCode != p.CodeHash || !s.now().Before(rec.PendingExpires) || rec.PendingGen != rec.PairingGeneration {
		return burn(bridge.ErrPairingInvalid)
	}
	if owner != p.WorkerID {
		return burn(bridge.ErrPairingInvalid)
	}
	if !p.PublicKeyValid {
		return burn(bridge.ErrPublicKeyInvalid)
	}
	rec.IdentityID = bridge.NewID()
	rec.PublicKey = p.PublicKey
	rec.Binding = rec.PendingBinding
	rec.CredentialHash, rec.CredentialExpires = p.CredentialHash, p.ExpiresAt
	rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = "", time.Time{}, nil, 0
	if err := s.save(rec, nil, []string{p.CodeHash}); err != nil {
		return "", err
	}
	return rec.IdentityID, nil
}

// Revoke implements store.Store.
func (s *Store) Revoke(ctx context.Context, workerID string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec := s.record(workerID)
	var del []string
	if rec.PendingCode != "" {
		del = append(del, rec.PendingCode)
	}
	rec.PairingGeneration++
	rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = "", time.Time{}, nil, 0
	rec.IdentityID, rec.PublicKey, rec.Binding, rec.CredentialHash, rec.CredentialExpires = "", "", nil, "", time.Time{}
	if err := s.save(rec, nil, del); err != nil {
		return err
	}
	// A revoked worker is no longer dispatchable.
	s.live(workerID).reg = nil
	return nil
}

// Credential implements store.Store.
func (s *Store) Credential(ctx context.Context, workerID, credentialHash string) (*store.Credential, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	rec, ok := s.workers[workerID]
	if !ok || rec.CredentialHash == "" || rec.CredentialHash != credentialHash || !s.now().Before(rec.CredentialExpires) {
		return nil, bridge.ErrCredentialInvalid
	}
	return &store.Credential{
		WorkerID: workerID, IdentityID: rec.IdentityID, PublicKey: rec.PublicKey, ExpiresAt: rec.CredentialExpires,
		Binding: rec.Binding, PairingGeneration: rec.PairingGeneration,
	}, nil
}

// RefreshCredential implements store.Store.
func (s *Store) RefreshCredential(ctx context.Context, workerID, oldHash, newHash string, expiresAt time.Time) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	cur, ok := s.workers[workerID]
	if !ok || cur.CredentialHash == "" || cur.CredentialHash != oldHash || !s.now().Before(cur.CredentialExpires) {
		return bridge.ErrCredentialInvalid
	}
	rec := cur.Clone()
	rec.CredentialHash, rec.CredentialExpires = newHash, expiresAt
	return s.save(rec, nil, nil)
}

// UseNonce implements store.Store.
func (s *Store) UseNonce(ctx context.Context, credentialHash, nonceHash string, timestamp time.Time) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	// Nonces do not survive a restart, so a proof minted before this store
	// opened might have been seen by the previous process.
	if timestamp.Before(s.openedAt) {
		return bridge.ErrProofReplayed
	}
	now := s.now()
	if now.Sub(s.nonceEpoch) >= s.nonceTTL {
		// Everything in the old generation predates the epoch, which is at
		// least one TTL ago; everything current moves to old and survives
		// until the next rotation, at least one TTL from now.
		s.oldNonces, s.nonces, s.nonceEpoch = s.nonces, map[string]struct{}{}, now
	}
	key := credentialHash + ":" + nonceHash
	if _, seen := s.nonces[key]; seen {
		return bridge.ErrProofReplayed
	}
	if _, seen := s.oldNonces[key]; seen {
		return bridge.ErrProofReplayed
	}
	s.nonces[key] = struct{}{}
	return nil
}

func (s *Store) ready(l *live) bool {
	if l.reg == nil {
		return false
	}
	if !l.reg.Capabilities.RequiresReadyConfirmation {
		return true
	}
	return l.readyMark == fmt.Sprintf("%s:%d", l.reg.IncarnationID, l.reg.Generation)
}

// Register implements store.Store (§7.2).
func (s *Store) Register(ctx context.Context, p store.RegisterParams) (*store.Registration, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	rec := s.record(p.WorkerID)
	now := s.now()
	// 1. A revoke or re-pairing raced this request.
	if p.Auth.CredentialHash != "" {
		if rec.PairingGeneration != p.Auth.PairingGeneration || rec.CredentialHash != p.Auth.CredentialHash {
			return nil, bridge.ErrWorkerFenced
		}
		if rec.IdentityID != p.Auth.IdentityID {
			return nil, bridge.ErrWorkerUnauthorized
		}
	}
	inc := p.IncarnationID
	// 2. This incarnation's own marks.
	if _, q := rec.Quarantined[inc]; q {
		return nil, bridge.ErrWorkerQuarantined
	}
	if _, f := rec.Fenced[inc]; f {
		return nil, bridge.ErrWorkerFenced
	}
	l := s.live(p.WorkerID)
	// 3. One active incarnation.
	if l.lock != nil {
		if (l.reg != nil && l.reg.IncarnationID != inc) || (l.reg == nil && l.lock.incarnationID != inc) {
			return nil, bridge.ErrWorkerBusy
		}
	}
	changed := false
	if rec.RegOwner != "" && rec.RegOwner != inc {
		if rec.Fenced == nil {
			rec.Fenced = map[string]time.Time{}
		}
		rec.Fenced[rec.RegOwner] = now
		for k, t := range rec.Fenced {
			if now.Sub(t) > store.DefaultFenceRetention {
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
		if err := s.save(rec, nil, nil); err != nil {
			return nil, err
		}
		for id, a := range l.asg {
			if a.a.IncarnationID != inc && !a.acked && a.settlement == nil {
				// Work queued for a fenced incarnation can never be leased.
				l.queues[a.a.IncarnationID] = slices.DeleteFunc(l.queues[a.a.IncarnationID], func(x string) bool { return x == id })
			}
		}
		if l.readyMark != "" {
			l.readyMark = ""
		}
	}
	// 5. Store the registration.
	reg := &store.Registration{
		WorkerID: p.WorkerID, IncarnationID: inc, Generation: rec.RegGeneration, RegisteredAt: now,
		ExpiresAt: now.Add(s.leaseTTL), LeaseTTL: s.leaseTTL, Capabilities: p.Capabilities,
		CapabilitiesJSON: slices.Clone(p.CapabilitiesJSON), IdentityID: p.Auth.IdentityID, Binding: p.Auth.Binding,
	}
	l.reg = reg
	out := *reg
	return &out, nil
}

// Ready implements store.Store (§3.4).
func (s *Store) Ready(ctx context.Context, workerID, incarnationID string, gen int64) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec := s.record(workerID)
	if _, q := rec.Quarantined[incarnationID]; q {
		return bridge.ErrWorkerQuarantined
	}
	if _, f := rec.Fenced[incarnationID]; f {
		return bridge.ErrWorkerFenced
	}
	l := s.live(workerID)
	if l.reg == nil {
		return bridge.ErrWorkerOffline
	}
	if l.reg.IncarnationID != incarnationID || l.reg.Generation != gen {
		return bridge.ErrWorkerFenced
	}
	l.readyMark = fmt.Sprintf("%s:%d", incarnationID, gen)
	l.readyUntil = s.now().Add(store.ReadyTTL(s.leaseTTL))
	return nil
}

func (s *Store) state(workerID string) store.WorkerState {
	l := s.live(workerID)
	st := store.WorkerState{WorkerID: workerID, Online: l.reg != nil, Ready: s.ready(l), Busy: l.lock != nil}
	if l.reg != nil {
		r := *l.reg
		st.Registration = &r
	}
	if rec, ok := s.workers[workerID]; ok {
		st.Binding = rec.Binding
	}
	return st
}

// Worker implements store.Store.
func (s *Store) Worker(ctx context.Context, workerID string) (*store.WorkerState, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	st := s.state(workerID)
	return &st, nil
}

// Workers implements store.Store: every worker with a live registration.
func (s *Store) Workers(ctx context.Context) ([]store.WorkerState, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []store.WorkerState
	for id := range s.lives {
		if st := s.state(id); st.Online {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b store.WorkerState) int {
		switch {
		case a.WorkerID < b.WorkerID:
			return -1
		case a.WorkerID > b.WorkerID:
			return 1
		}
		return 0
	})
	return out, nil
}

// Enqueue implements store.Store (§7.3 dispatch steps 1–3).
func (s *Store) Enqueue(ctx context.Context, p store.EnqueueParams) (*store.Assignment, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	l := s.live(p.WorkerID)
	if !s.ready(l) {
		return nil, bridge.ErrWorkerOffline
	}
	rec := s.record(p.WorkerID)
	if p.RuntimeSessionID != "" && !l.reg.Capabilities.StatefulWorkspace {
		return nil, bridge.ErrWorkerMismatch
	}
	if p.RuntimeSessionID != "" && rec.WorkspaceFences[sessionKey(p.RuntimeSessionID)] != "" {
		return nil, bridge.ErrWorkspaceQuarantined
	}
	if l.lock != nil {
		return nil, bridge.ErrWorkerBusy
	}
	if _, dup := s.asgOwner[p.AssignmentID]; dup {
		return nil, bridge.ErrAssignmentInvalid
	}
	gen := s.issued[p.WorkerID] + 1
	dirty := false
	if gen > rec.AssignGeneration {
		rec.AssignGeneration = gen + generationBlock - 1
		dirty = true
	}
	if p.RuntimeSessionID != "" {
		if rec.WorkspaceFences == nil {
			rec.WorkspaceFences = map[string]string{}
		}
		rec.WorkspaceFences[sessionKey(p.RuntimeSessionID)] = p.AssignmentID
		dirty = true
	}
	if dirty {
		if err := s.save(rec, nil, nil); err != nil {
			return nil, err
		}
	}
	s.issued[p.WorkerID] = gen
	inc := l.reg.IncarnationID
	a := store.Assignment{
		ID: p.AssignmentID, WorkerID: p.WorkerID, IncarnationID: inc, Generation: gen,
		LeaseToken: p.LeaseToken, LeaseTokenHash: p.LeaseTokenHash, IdentityID: l.reg.IdentityID, ExpiresAt: p.ExpiresAt,
		RuntimeSessionID: p.RuntimeSessionID, ExecutionKind: p.ExecutionKind, Request: slices.Clone(p.Request),
	}
	l.lock = &lockRec{assignmentID: a.ID, incarnationID: inc, until: p.ExpiresAt.Add(s.grace)}
	l.queues[inc] = append(l.queues[inc], a.ID)
	l.asg[a.ID] = &asgRec{a: a, gcAt: p.ExpiresAt.Add(s.grace)}
	if gc := p.ExpiresAt.Add(s.grace); l.nextGC.IsZero() || gc.Before(l.nextGC) {
		l.nextGC = gc
	}
	s.asgOwner[a.ID] = p.WorkerID
	out := a
	return &out, nil
}

func (s *Store) clearFenceIfNamed(rec *workerRec, a *store.Assignment) (bool, error) {
	if a.RuntimeSessionID == "" {
		return false, nil
	}
	k := sessionKey(a.RuntimeSessionID)
	if rec.WorkspaceFences[k] != a.ID {
		return false, nil
	}
	delete(rec.WorkspaceFences, k)
	return true, s.save(rec, nil, nil)
}

// Lease implements store.Store (§7.3 lease).
func (s *Store) Lease(ctx context.Context, workerID, incarnationID, identityID string) (*store.Assignment, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	rec := s.record(workerID)
	if _, f := rec.Fenced[incarnationID]; f {
		return nil, bridge.ErrWorkerFenced
	}
	if rec.RegOwner != "" && rec.RegOwner != incarnationID {
		return nil, bridge.ErrWorkerFenced
	}
	l := s.live(workerID)
	now := s.now()
	for {
		id, claimed := l.claims[incarnationID]
		if !claimed {
			q := l.queues[incarnationID]
			if len(q) == 0 {
				return nil, nil
			}
			id = q[0]
			l.queues[incarnationID] = q[1:]
			l.claims[incarnationID] = id
		}
		a, ok := l.asg[id]
		if !ok || a.a.WorkerID != workerID || a.a.IncarnationID != incarnationID ||
			(identityID != "" && a.a.IdentityID != identityID) || a.finished || a.settlement != nil {
			delete(l.claims, incarnationID)
			continue
		}
		if !now.Before(a.a.ExpiresAt) {
			delete(l.claims, incarnationID)
			if !a.acked {
				if _, err := s.clearFenceIfNamed(rec, &a.a); err != nil {
					return nil, err
				}
			}
			continue
		}
		a.delivered = true
		out := a.a
		return &out, nil
	}
}

// Ack implements store.Store (§3.6).
func (s *Store) Ack(ctx context.Context, p store.AckParams) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec := s.record(p.WorkerID)
	l := s.live(p.WorkerID)
	a, ok := l.asg[p.AssignmentID]
	if !ok || a.finished || a.a.IncarnationID != p.IncarnationID || rec.RegOwner != p.IncarnationID ||
		a.a.Generation != p.Generation || a.a.LeaseTokenHash != p.LeaseTokenHash || l.claims[p.IncarnationID] != p.AssignmentID {
		return bridge.ErrAssignmentFenced
	}
	a.acked = true
	return nil
}

// Cancelled implements store.Store.
func (s *Store) Cancelled(ctx context.Context, workerID, incarnationID, assignmentID string) (bool, error) {
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	rec := s.record(workerID)
	l := s.live(workerID)
	a, ok := l.asg[assignmentID]
	if !ok || a.a.IncarnationID != incarnationID || rec.RegOwner != incarnationID || a.cancelled {
		return true, nil
	}
	return false, nil
}

// Cancel implements store.Store.
func (s *Store) Cancel(ctx context.Context, workerID, assignmentID string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if a, ok := s.live(workerID).asg[assignmentID]; ok {
		a.cancelled = true
	}
	return nil
}

// Settle implements store.Store (§7.3 settle).
func (s *Store) Settle(ctx context.Context, p store.SettleParams) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	owner, ok := s.asgOwner[p.AssignmentID]
	if ok {
		// sweep may have collected it
		if _, still := s.live(owner).asg[p.AssignmentID]; !still {
			ok = false
		}
	}
	if !ok {
		return bridge.ErrAssignmentNotFound
	}
	l := s.live(owner)
	a := l.asg[p.AssignmentID]
	// 1. Idempotency on the canonical bytes.
	if a.settlement != nil {
		if string(a.settlement.Canonical) == string(p.Canonical) {
			return nil
		}
		return bridge.ErrAssignmentFenced
	}
	// 3. Another worker's assignment.
	if owner != p.WorkerID {
		return bridge.ErrWorkerMismatch
	}
	rec := s.record(p.WorkerID)
	// 4. Fencing fields.
	if a.a.IncarnationID != p.IncarnationID || rec.RegOwner != p.IncarnationID || a.a.Generation != p.Generation ||
		a.a.LeaseTokenHash != p.LeaseTokenHash || (p.IdentityID != "" && a.a.IdentityID != p.IdentityID) {
		return bridge.ErrAssignmentFenced
	}
	// 5. Deadline.
	if p.Status == bridge.StatusFulfilled && !s.now().Before(a.a.ExpiresAt) {
		return bridge.ErrAssignmentExpired
	}
	// 6. Workspace fence of a stateful assignment.
	if sid := a.a.RuntimeSessionID; sid != "" {
		if rec.WorkspaceFences[sessionKey(sid)] != a.a.ID {
			return bridge.ErrWorkspaceQuarantined
		}
		if p.Status == bridge.StatusRejected {
			if _, err := s.clearFenceIfNamed(rec, &a.a); err != nil {
				return err
			}
		}
	}
	// 7. Store.
	a.settlement = &store.Settlement{Status: p.Status, Canonical: slices.Clone(p.Canonical)}
	if l.claims[p.IncarnationID] == a.a.ID {
		delete(l.claims, p.IncarnationID)
	}
	a.acked = false
	if a.finished && l.lock != nil && l.lock.assignmentID == a.a.ID {
		// The dispatcher gave up already; a late settlement frees the worker.
		l.lock = nil
	}
	return nil
}

// Settlement implements store.Store.
func (s *Store) Settlement(ctx context.Context, workerID, assignmentID string) (*store.Settlement, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	a, ok := s.live(workerID).asg[assignmentID]
	if !ok || a.settlement == nil {
		return nil, nil
	}
	out := *a.settlement
	return &out, nil
}

// Complete implements store.Store (§7.3 dispatch steps 4, 6 and 7).
func (s *Store) Complete(ctx context.Context, workerID, assignmentID string) (*store.Settlement, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	l := s.live(workerID)
	a, ok := l.asg[assignmentID]
	if !ok || a.finished {
		return nil, bridge.ErrAssignmentExpired
	}
	rec := s.record(workerID)
	a.finished = true
	inc := a.a.IncarnationID
	l.queues[inc] = slices.DeleteFunc(l.queues[inc], func(x string) bool { return x == assignmentID })
	releaseLock := func() {
		if l.lock != nil && l.lock.assignmentID == assignmentID {
			l.lock = nil
		}
	}
	if a.settlement != nil {
		st := *a.settlement
		releaseLock()
		// The record stays until deadline + grace so that a resent
		// settlement still gets its idempotent 200.
		if st.Status == bridge.StatusFulfilled && a.a.RuntimeSessionID != "" {
			committed, err := s.clearFenceIfNamed(rec, &a.a)
			if err != nil {
				// Finalising failed (§10.3): quarantine the incarnation so
				// it can no longer register, fail closed in memory even if
				// the mark cannot be persisted, and keep the fence.
				s.quarantine(workerID, inc)
				return nil, err
			}
			if !committed {
				return &st, bridge.ErrWorkspaceQuarantined
			}
		}
		return &st, nil
	}
	// Expired without a settlement.
	a.cancelled = true
	if l.claims[inc] == assignmentID && !a.acked {
		delete(l.claims, inc)
	}
	if a.acked {
		// Acked but never settled: the worker may still be running it, so
		// the fence and the lock stay until they expire.
		return nil, bridge.ErrAssignmentExpired
	}
	if _, err := s.clearFenceIfNamed(rec, &a.a); err != nil {
		return nil, err
	}
	releaseLock()
	s.dropAssignment(l, assignmentID)
	return nil, bridge.ErrAssignmentExpired
}

// quarantine marks an incarnation quarantined and drops its registration.
func (s *Store) quarantine(workerID, inc string) {
	rec := s.record(workerID)
	if rec.Quarantined == nil {
		rec.Quarantined = map[string]time.Time{}
	}
	rec.Quarantined[inc] = s.now()
	if err := s.save(rec, nil, nil); err != nil {
		s.workers[workerID] = rec
	}
	if l := s.lives[workerID]; l != nil && l.reg != nil && l.reg.IncarnationID == inc {
		l.reg = nil
	}
}

// Withdraw implements store.Store.
func (s *Store) Withdraw(ctx context.Context, workerID, assignmentID string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	l := s.live(workerID)
	a, ok := l.asg[assignmentID]
	if !ok || a.finished {
		return bridge.ErrAssignmentNotFound
	}
	if a.acked || a.settlement != nil {
		return bridge.ErrAssignmentFenced
	}
	rec := s.record(workerID)
	if _, err := s.clearFenceIfNamed(rec, &a.a); err != nil {
		return err
	}
	if l.lock != nil && l.lock.assignmentID == assignmentID {
		l.lock = nil
	}
	s.dropAssignment(l, assignmentID)
	return nil
}

// ResetWorkspace implements store.Store (§3.7).
func (s *Store) ResetWorkspace(ctx context.Context, workerID, incarnationID, runtimeSessionID string) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	rec := s.record(workerID)
	if _, f := rec.Fenced[incarnationID]; f || rec.RegOwner != incarnationID {
		return bridge.ErrWorkerFenced
	}
	if s.live(workerID).lock != nil {
		return bridge.ErrWorkerBusy
	}
	k := sessionKey(runtimeSessionID)
	if _, ok := rec.WorkspaceFences[k]; !ok {
		return nil
	}
	delete(rec.WorkspaceFences, k)
	return s.save(rec, nil, nil)
}
