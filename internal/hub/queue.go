package hub

import (
	"context"
	"errors"
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

func queueKey(tenant, plan string) string { return "tq:" + tenant + ":" + plan }
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
		n, err := b.ZCount(ctx, t.key, -1)
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
