package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/idempotency"
)

// The hub's Idempotency-Key records live in its store (store.Backend), so that hub replicas on one
// Redis agree: a retry that lands on another replica replays, or waits for, the first one's run.
//
// One record per key, "idem:<scope>:…" (out of the protocol's "{w:", "asg:", "code:", "nonce:" and
// "epoch" keys), JSON of idemRecord, Durable class, so that the embedded store keeps claims and answers
// across a restart (a retry after `kill -9` must not run the code again), with the record's own expiry:
// the claim bound plus the TTL while pending, the TTL once finished. The claim is one Update that reads the
// key and writes the pending record only if it is absent, so two replicas cannot both claim. A pending
// claim is bound by its request's deadline plus a grace (Guard.PendingFor) and by the life of the replica
// running it: once either is over, the claim is lost — its run may have happened, so every repeat is
// answered 502 outcome_unknown (idempotency.Response.Lost) until the record expires, and nothing runs
// again. Waiters re-read the record on a change or a poll. The
// bound: a response over the per-record cap is kept as a too-large marker, every record expires with
// the TTL, and the finished records are indexed in the set "idem:index" ("<unix nanos>|<bytes>|<key>")
// so that, at most once a second per replica and after each Finish, the oldest finished records beyond
// the entries and bytes bounds are deleted (EventEvicted). Replicas trim concurrently, so the bound may
// be exceeded by what finished within that second.

type idemRecord struct {
	idempotency.Entry
	Holder string `json:"holder"` // the claim's random token: only its holder finishes or releases it
	// Replica runs the claim; ClaimUntil is its bound (the request's deadline plus a grace). Records of
	// older hubs have neither and are bounded by their expiry alone.
	Replica    string    `json:"replica,omitempty"`
	ClaimUntil time.Time `json:"claimUntil,omitzero"`
}

// lost reports whether a pending claim can no longer finish: its bound passed or its replica is gone.
func (s *backendIdem) lost(ctx context.Context, rec *idemRecord) (bool, error) {
	if rec.Done {
		return false, nil
	}
	if !rec.ClaimUntil.IsZero() && !s.b.Now().Before(rec.ClaimUntil) {
		return true, nil
	}
	if s.replica == nil {
		return false, nil
	}
	alive, err := s.replica.alive(ctx, rec.Replica)
	return !alive, err
}

// settled is what a reader makes of a record: a lost claim reads as finished, lost.
func (s *backendIdem) settled(ctx context.Context, rec *idemRecord) (*idempotency.Entry, error) {
	lost, err := s.lost(ctx, rec)
	if err != nil {
		return nil, errors.Join(idempotency.ErrUnavailable, err)
	}
	if lost {
		return &idempotency.Entry{Fingerprint: rec.Fingerprint, Done: true, Response: &idempotency.Response{Status: http.StatusBadGateway, Lost: true}}, nil
	}
	return &rec.Entry, nil
}

type backendIdem struct {
	b          store.Backend
	maxEntries int
	maxTotal   int64
	lastTrim   time.Time
	trimEvery  time.Duration                                // at most one trim per interval per replica (1 s)
	watch      func(topic string) (<-chan struct{}, func()) // the hub's wake-up board (waits)
	poll       time.Duration
	maxBytes   int
	onEvent    func(string)
	ttl        time.Duration   // how long a lost claim is kept after its bound (the replay window)
	replica    *replicaRecords // whose heartbeats say which claim holders are alive (nil: none)
	mu         sync.Mutex
	held       map[string]string // key → holder token of the claims this replica holds
}

func newBackendIdem(b store.Backend, watch func(string) (<-chan struct{}, func()), poll time.Duration, maxBytes int, onEvent func(string)) *backendIdem {
	return &backendIdem{b: b, trimEvery: time.Second, maxEntries: 10000, maxTotal: 64 << 20, watch: watch, poll: min(poll, time.Second), maxBytes: maxBytes, onEvent: onEvent, held: map[string]string{}}
}

func idemKey(key string) string { return "idem:" + key }

// idemTopic is notified when key's claim is finished or released.
func idemTopic(key string) string { return "idem:" + key }

func decodeIdem(raw []byte) (*idemRecord, error) {
	var rec idemRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, errors.Join(store.ErrCorrupt, err)
	}
	return &rec, nil
}

// Claim implements idempotency.Store.
func (s *backendIdem) Claim(ctx context.Context, key, fp string, pending time.Duration) (*idempotency.Entry, error) {
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	holder := hex.EncodeToString(tok[:])
	var existing *idemRecord
	err := s.b.Update(ctx, func(tx store.Txn) error {
		existing = nil
		got, err := tx.Get(idemKey(key))
		if err != nil {
			return err
		}
		if got[0] != nil {
			if existing, err = decodeIdem(got[0]); err != nil {
				return store.Abort(err)
			}
			return nil
		}
		rec := idemRecord{Entry: idempotency.Entry{Fingerprint: fp}, Holder: holder, ClaimUntil: tx.Now().Add(pending)}
		if s.replica != nil {
			rec.Replica = s.replica.id
		}
		b, _ := json.Marshal(rec)
		tx.Put(idemKey(key), b, store.Durable, rec.ClaimUntil.Add(s.ttl))
		return nil
	})
	if err != nil {
		return nil, errors.Join(idempotency.ErrUnavailable, err)
	}
	if existing != nil {
		return s.settled(ctx, existing)
	}
	s.mu.Lock()
	s.held[key] = holder
	s.mu.Unlock()
	return nil, nil
}

// takeHolder returns and forgets this replica's token for key.
func (s *backendIdem) takeHolder(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[key]
	delete(s.held, key)
	return h
}

// Finish implements idempotency.Store.
func (s *backendIdem) Finish(ctx context.Context, key string, resp *idempotency.Response, ttl time.Duration) error {
	holder := s.takeHolder(key)
	if len(resp.Body) > s.maxBytes {
		resp = &idempotency.Response{Status: resp.Status, TooLarge: true}
		s.onEvent(idempotency.EventTooLarge)
	}
	err := s.b.Update(ctx, func(tx store.Txn) error {
		got, err := tx.Get(idemKey(key))
		if err != nil || got[0] == nil {
			return err // the claim expired meanwhile: nothing to record
		}
		rec, err := decodeIdem(got[0])
		if err != nil || rec.Holder != holder || rec.Done {
			return store.Abort(err)
		}
		rec.Done, rec.Response = true, resp
		b, _ := json.Marshal(rec)
		tx.Put(idemKey(key), b, store.Durable, tx.Now().Add(ttl))
		tx.SetAdd(idemIndex, fmt.Sprintf("%d|%d|%s", tx.Now().UnixNano(), len(b), key))
		tx.Notify(idemTopic(key)) // wake its waiters on every replica
		return nil
	})
	if err == nil {
		s.onEvent(idempotency.EventRecorded)
		s.trim(ctx)
	}
	return err
}

const idemIndex = "idem:index"

type indexed struct {
	member, key string
	at, size    int64
}

// trim deletes the oldest finished records beyond the bounds, and index members whose record expired;
// at most once a second per replica. A failure leaves the bound to the next trim (the TTL still holds).
func (s *backendIdem) trim(ctx context.Context) {
	s.mu.Lock()
	now := s.b.Now()
	if now.Sub(s.lastTrim) < s.trimEvery && !s.lastTrim.IsZero() {
		s.mu.Unlock()
		return
	}
	s.lastTrim = now
	s.mu.Unlock()
	members, err := s.b.Members(ctx, idemIndex)
	if err != nil {
		return
	}
	list := make([]indexed, 0, len(members))
	var total int64
	for _, m := range members {
		var e indexed
		parts := strings.SplitN(m, "|", 3)
		if len(parts) != 3 {
			continue
		}
		e.member, e.key = m, parts[2]
		e.at, _ = strconv.ParseInt(parts[0], 10, 64)
		e.size, _ = strconv.ParseInt(parts[1], 10, 64)
		list = append(list, e)
		total += e.size
	}
	sort.Slice(list, func(i, j int) bool { return list[i].at < list[j].at })
	for i, e := range list {
		over := len(list)-i > s.maxEntries || total > s.maxTotal
		evicted := false
		_ = s.b.Update(ctx, func(tx store.Txn) error {
			evicted = false
			got, err := tx.Get(idemKey(e.key))
			if err != nil {
				return err
			}
			if got[0] == nil { // expired: only the index member is left
				tx.SetRemove(idemIndex, e.member)
				return nil
			}
			if !over {
				return store.Abort(errStopTrim)
			}
			tx.Delete(idemKey(e.key))
			tx.SetRemove(idemIndex, e.member)
			evicted = true
			return nil
		})
		if evicted {
			s.onEvent(idempotency.EventEvicted)
		}
		if !over {
			return // the rest is younger and within the bounds
		}
		total -= e.size
	}
}

var errStopTrim = errors.New("within the bounds")

// Release implements idempotency.Store.
func (s *backendIdem) Release(ctx context.Context, key string) error {
	holder := s.takeHolder(key)
	return s.b.Update(ctx, func(tx store.Txn) error {
		got, err := tx.Get(idemKey(key))
		if err != nil || got[0] == nil {
			return err
		}
		// Past its bound a claim reads as lost to everyone else; deleting it then would let a repeat run.
		if rec, err := decodeIdem(got[0]); err == nil && rec.Holder == holder && !rec.Done &&
			(rec.ClaimUntil.IsZero() || tx.Now().Before(rec.ClaimUntil)) {
			tx.Delete(idemKey(key))
			tx.Notify(idemTopic(key))
		}
		return nil
	})
}

// Wait implements idempotency.Store: it re-reads the record when its finish or release is notified (on
// any replica) and at least every poll interval (at most a second: the claim's holder may die).
func (s *backendIdem) Wait(ctx context.Context, key string) (*idempotency.Entry, error) {
	for {
		e, done, err := s.waitOnce(ctx, key)
		if done || err != nil {
			return e, err
		}
	}
}

// waitOnce reads key's record and sleeps until it changes, the poll interval or ctx.
func (s *backendIdem) waitOnce(ctx context.Context, key string) (*idempotency.Entry, bool, error) {
	changed, release := s.watch(idemTopic(key)) // before the read, so that a change after it is not missed
	defer release()
	got, err := s.b.Read(ctx, idemKey(key))
	if err != nil {
		return nil, true, errors.Join(idempotency.ErrUnavailable, err)
	}
	if got[0] == nil {
		return nil, true, nil
	}
	rec, err := decodeIdem(got[0])
	if err != nil {
		return nil, true, err
	}
	if e, err := s.settled(ctx, rec); err != nil || e.Done {
		return e, true, err
	}
	t := time.NewTimer(s.poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, true, ctx.Err()
	case <-changed:
	case <-t.C:
	}
	return nil, false, nil
}

// setupIdempotency builds the guard of /v1/exec and the chat route when the store exposes its Backend.
func (h *Hub) setupIdempotency(st Store) {
	bs, ok := st.(interface{ Backend() store.Backend })
	if !ok || h.cfg.IdempotencyTTL < 0 {
		return
	}
	event := func(e string) { h.metrics.Idempotency.WithLabelValues(e).Inc() }
	is := newBackendIdem(bs.Backend(), h.waits.watch, h.cfg.PollInterval, int(h.cfg.IdempotencyMaxBytes), event)
	is.maxEntries, is.maxTotal = h.cfg.IdempotencyMaxEntries, h.cfg.IdempotencyMaxTotalBytes
	is.ttl, is.replica = h.cfg.IdempotencyTTL, h.replica
	h.idem = &idempotency.Guard{
		Store:   is,
		TTL:     h.cfg.IdempotencyTTL,
		Pending: h.cfg.MaxTimeout + h.cfg.QueueTimeout,
		// A claim lasts as long as its request may: the deadline (which covers queueing) plus the grace
		// in which the hub collects a settlement.
		PendingFor: func(r *http.Request) time.Duration {
			def := h.cfg.ExecTimeout
			if bridge.RequestPath(r) == "/v1/chat/completions" {
				def = h.cfg.ChatTimeout
			}
			d, err := h.deadline(r, def)
			if err != nil {
				return 0
			}
			return time.Until(d) + store.DefaultGrace
		},
		MaxBody: h.cfg.MaxBody,
		OnEvent: event,
		Credential: func(r *http.Request) string {
			if k := h.clientKey(r); k != nil {
				return "key:" + k.Key
			}
			return ""
		},
		Detach: func(r *http.Request) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
			go func() {
				select {
				case <-h.closing:
					cancel()
				case <-ctx.Done():
				}
			}()
			return ctx, cancel
		},
	}
}

// idempotent puts a client route behind the guard once the caller is authenticated (an unknown key is
// answered 401 by the route itself, and never recorded).
func (h *Hub) idempotent(route http.HandlerFunc, fail func(http.ResponseWriter, *clientError)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.idem == nil || r.Method != http.MethodPost || h.clientKey(r) == nil {
			route(w, r)
			return
		}
		h.idem.Wrap(route, func(w http.ResponseWriter, status int, code, msg string) {
			if code == "idempotency_unavailable" {
				// Its store is the hub's store: the same outage, the same answer (issue 22).
				fail(w, errStoreUnavailable())
				return
			}
			fail(w, &clientError{status: status, code: code, message: msg})
		}).ServeHTTP(w, r)
	}
}
