package hub

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// Client requests that find no free worker wait in a queue in the store, one per tenant and plan
// ("tq:<tenant>:<plan>", a sorted set of tickets by arrival), so that every replica serves a tenant's
// waiting requests first come, first served, and a new request never overtakes one already waiting (it
// joins the queue whenever the queue is not empty). Only the first ticket competes for freed capacity
// (store.TopicFree); when it leaves, the next one is told (its ticket's topic). A ticket's record
// ("tk:<id>") is renewed while its request waits, so one whose replica died lapses within
// ticketTTL and is skipped by the next in line.

const (
	ticketBeat = 5 * time.Second // how often a waiting request renews its ticket
	ticketTTL  = 3 * ticketBeat
)

// queueTopicPrefix begins every queue's key, which is also the topic its joins notify.
const queueTopicPrefix = "tq:"

func queueKey(tenant, plan string) string { return queueTopicPrefix + tenant + ":" + plan }
func ticketKey(id string) string          { return "tk:" + id }

// ticket is one request's place in its queue.
type ticket struct {
	h       *Hub
	key, id string
	until   time.Time // the queue timeout
	joined  bool
	renewed time.Time
}

func (h *Hub) newTicket(tenant, plan string, until time.Time) *ticket {
	return &ticket{h: h, key: queueKey(tenant, plan), id: bridge.NewID(), until: until}
}

// topic is notified when the ticket's turn has come.
func (t *ticket) topic() string { return ticketKey(t.id) }

func (t *ticket) backend() store.Backend { return t.h.replica.b }

// note tells the hub's store health what a queue operation met (counted as operation "queue").
func (t *ticket) note(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		t.h.storeFailed("queue", err)
	}
	return err
}

// first reports whether the request may take a worker now: before joining, when nobody waits; after,
// when it is first in line. Tickets of dead requests ahead of it are dropped on the way.
func (t *ticket) first(ctx context.Context) (bool, error) {
	b := t.backend()
	if !t.joined {
		if t.h.queued.empty(t.key) {
			return true, nil
		}
		gen := t.h.queued.generation()
		n, err := b.ZCount(ctx, t.key, -1)
		if err == nil && n == 0 {
			t.h.queued.foundEmpty(t.key, gen)
		}
		return n == 0, t.note(err)
	}
	if err := t.renew(ctx); err != nil {
		return false, err
	}
	for {
		head, ok, err := b.ZFirst(ctx, t.key)
		if err != nil || !ok || head == t.id {
			return ok && head == t.id, t.note(err)
		}
		v, err := b.Read(ctx, ticketKey(head))
		if err != nil || v[0] != nil {
			return false, t.note(err)
		}
		// The request ahead is gone (its replica died): skip it.
		if err := b.Update(ctx, func(tx store.Txn) error { tx.ZRem(t.key, head); return nil }); err != nil {
			return false, err
		}
	}
}

// join puts the ticket at the end of its queue, unless max tickets wait already (full).
func (t *ticket) join(ctx context.Context, max int) (full bool, err error) {
	b := t.backend()
	n, err := b.ZCount(ctx, t.key, -1)
	if err != nil || n >= max {
		return err == nil, t.note(err)
	}
	err = b.Update(ctx, func(tx store.Txn) error {
		tx.Put(ticketKey(t.id), []byte(t.h.replica.id), store.Volatile, tx.Now().Add(ticketTTL))
		tx.ZAdd(t.key, t.id, float64(tx.Now().UnixMicro()), false)
		tx.Notify(t.key) // every replica's queueHints forgets that the queue was empty
		return nil
	})
	if err == nil {
		t.joined, t.renewed = true, time.Now()
	}
	return false, t.note(err)
}

// renew keeps the ticket's record alive while the request waits.
func (t *ticket) renew(ctx context.Context) error {
	if time.Since(t.renewed) < ticketBeat {
		return nil
	}
	err := t.backend().Update(ctx, func(tx store.Txn) error {
		tx.Put(ticketKey(t.id), []byte(t.h.replica.id), store.Volatile, tx.Now().Add(ticketTTL))
		return nil
	})
	if err == nil {
		t.renewed = time.Now()
	}
	return t.note(err)
}

// leave takes the ticket out of its queue; if it was first, the next in line is told its turn came.
func (t *ticket) leave(ctx context.Context) {
	if !t.joined {
		return
	}
	t.joined = false
	b := t.backend()
	head, _, _ := b.ZFirst(ctx, t.key)
	_ = b.Update(ctx, func(tx store.Txn) error {
		tx.ZRem(t.key, t.id)
		tx.Delete(ticketKey(t.id))
		return nil
	})
	if head != t.id {
		return
	}
	if next, ok, err := b.ZFirst(ctx, t.key); err == nil && ok {
		_ = b.Update(ctx, func(tx store.Txn) error { tx.Notify(ticketKey(next)); return nil })
	}
}

// queueHintTTL bounds how long a replica trusts that a queue it found empty still is.
const queueHintTTL = time.Second

// queueHints spares the read that tells a new request whether anyone waits before it (a store command per
// dispatch): a replica that found a queue empty trusts that for queueHintTTL, unless a request joined it
// meanwhile — a join notifies the queue's topic to every replica — or the change feed reconnected (its
// topic ""). A read is trusted only when no join was heard while it was made (generation), so a join's
// notification that overtakes the read is not lost. A request may overtake one that joined on another
// replica only for as long as the join's notification takes to arrive (queueHintTTL when that replica is of
// an older release, whose joins notify nothing); once a queue forms, every dispatch reads it again.
type queueHints struct {
	mu    sync.Mutex
	gen   uint64
	found map[string]time.Time // queue key → when it was found empty
}

// empty reports whether key was found empty within queueHintTTL and nobody joined it since.
func (q *queueHints) empty(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	at, ok := q.found[key]
	return ok && time.Since(at) < queueHintTTL
}

// generation is read before a queue is read, and handed to foundEmpty.
func (q *queueHints) generation() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.gen
}

// foundEmpty records that key read empty, unless a join was heard since generation gen.
func (q *queueHints) foundEmpty(key string, gen uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if gen != q.gen {
		return
	}
	if q.found == nil || len(q.found) >= maxQueueHints {
		q.found = map[string]time.Time{} // a bound on the tenants × plans remembered; forgetting costs a read
	}
	q.found[key] = time.Now()
}

// maxQueueHints bounds the queues a replica remembers as empty.
const maxQueueHints = 4096

// joined forgets what a join (or, for "", a lost stretch of the change feed) may have made stale.
func (q *queueHints) joined(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gen++
	if key == "" {
		clear(q.found)
		return
	}
	delete(q.found, key)
}
