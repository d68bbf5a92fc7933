package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// A worker has Registration.Slots lease slots (LibreChat's lease slots: one registration per machine that
// runs several assignments at once; 1 when it asked for none). Each assignment it holds occupies one until
// it is settled, withdrawn or completed unacknowledged, or until its deadline plus the grace (§7.3's
// worker lock, one per slot). The worker's lease claims are per slot, so a lost lease reply is redelivered
// to the slot that asked.
//
// Workers whose registrations are alike (binding and capabilities) form a pool. Each pool has a sorted set
// of its workers with a free slot ("idle:<pool>", longest idle first) and one of its live workers
// ("live:<pool>", by registration expiry), so that dispatch takes an idle worker of an eligible pool in
// one step instead of reading every worker, and knows whether any is online. The sets are kept by the
// worker's own transactions; a worker left in an idle set after its registration lapsed is dropped when a
// dispatcher takes it (its Enqueue fails), and one taken by a dispatcher that died before enqueueing is put
// back by its next registration.

// MaxSlots is the most lease slots the hub grants one registration.
const MaxSlots = bridge.MaxLeaseSlots

// slotsRec holds the assignments that occupy the worker's slots. Records written before slots held one
// assignment in the legacy fields; they are read as one active entry.
type slotsRec struct {
	Active        map[string]slotRec `json:"active,omitempty"`
	AssignmentID  string             `json:"assignmentId,omitempty"`
	IncarnationID string             `json:"incarnationId,omitempty"`
	Until         time.Time          `json:"until,omitzero"`
}

type slotRec struct {
	IncarnationID string    `json:"incarnationId"`
	Until         time.Time `json:"until"`
	// Dispatcher is the hub replica waiting for the assignment's settlement, until the settlement (or a
	// sweep) ends its wait: the sweeper of a dead replica finds its work here.
	Dispatcher string `json:"dispatcher,omitempty"`
}

// loadSlots normalises a slots record: legacy fields folded in, entries past their time dropped.
func loadSlots(s *slotsRec, now time.Time) *slotsRec {
	if s == nil {
		s = &slotsRec{}
	}
	if s.Active == nil {
		s.Active = map[string]slotRec{}
	}
	if s.AssignmentID != "" {
		s.Active[s.AssignmentID] = slotRec{IncarnationID: s.IncarnationID, Until: s.Until}
		s.AssignmentID, s.IncarnationID, s.Until = "", "", time.Time{}
	}
	maps.DeleteFunc(s.Active, func(_ string, r slotRec) bool { return !now.Before(r.Until) })
	return s
}

// capacity is the worker's slot count.
func (t *wtx) capacity() int { return capacity(t.reg) }

// capacity is a registration's slot count (1 without one).
func capacity(reg *Registration) int {
	if reg == nil || reg.Slots < 1 {
		return 1
	}
	return reg.Slots
}

// busy reports every slot taken.
func (t *wtx) busy() bool { return len(t.slots.Active) >= t.capacity() }

// heldByOther reports an assignment of another incarnation in a slot.
func (t *wtx) heldByOther(inc string) bool {
	for _, r := range t.slots.Active {
		if r.IncarnationID != inc {
			return true
		}
	}
	return false
}

// occupy puts assignment id in a slot.
func (t *wtx) occupy(id, inc, dispatcher string, until time.Time) {
	t.slots.Active[id] = slotRec{IncarnationID: inc, Until: until, Dispatcher: dispatcher}
	t.slotsDirty = true
}

// releaseLock frees assignmentID's slot; queued clients are told.
func (t *wtx) releaseLock(assignmentID string) {
	if _, ok := t.slots.Active[assignmentID]; ok {
		delete(t.slots.Active, assignmentID)
		t.slotsDirty = true
		t.tx.Notify(TopicFree)
	}
}

// putSlots writes the slots record (with the longest entry's lifetime).
func (t *wtx) putSlots() {
	if len(t.slots.Active) == 0 {
		t.tx.Delete(lockKey(t.w))
		return
	}
	var until time.Time
	for _, r := range t.slots.Active {
		if r.Until.After(until) {
			until = r.Until
		}
	}
	t.putUntil(lockKey(t.w), encode(t.slots), until)
}

// claimKey names a lease claim: the incarnation's, or one slot's of it.
func claimKey(inc string, slot int) string {
	if slot < 0 {
		return inc
	}
	return inc + "#" + strconv.Itoa(slot)
}

// handOut gives assignment id (just put in a slot) to incarnation inc. With nothing queued before it, it
// goes straight into the claim of a lease slot that holds no live assignment — the claim that slot's lease
// poll reads — so the lease that delivers it writes nothing; otherwise it waits in the queue. A
// registration granted fewer than two slots leases without one (its claim is the incarnation's own); one
// granted K leases with slots 0..K-1, each slot's claim live exactly while its assignment holds a slot, so
// a registration that is not busy has a spent or empty claim to give.
func (t *wtx) handOut(inc, id string) {
	t.qDirty = true
	if len(t.q.Queues[inc]) == 0 {
		keys := []string{claimKey(inc, -1)}
		if n := t.capacity(); n >= 2 {
			keys = keys[:0]
			for s := range n {
				keys = append(keys, claimKey(inc, s))
			}
		}
		for _, ck := range keys {
			if cur, claimed := t.q.Claims[ck]; !claimed || !t.liveClaim(cur) {
				t.q.Claims[ck] = id
				return
			}
		}
	}
	t.q.Queues[inc] = append(t.q.Queues[inc], id)
}

// liveClaim reports whether a claim's assignment still holds a slot. One that does not was settled,
// withdrawn or completed, or is past its deadline and grace: nothing is left to deliver or acknowledge.
func (t *wtx) liveClaim(id string) bool {
	_, live := t.slots.Active[id]
	return live
}

// claimedBy reports whether one of inc's claims holds assignment id.
func (t *wtx) claimedBy(inc, id string) bool {
	for k, v := range t.q.Claims {
		if v == id && (k == inc || strings.HasPrefix(k, inc+"#")) {
			return true
		}
	}
	return false
}

// dropClaims forgets every claim of assignment id.
func (t *wtx) dropClaims(id string) {
	n := len(t.q.Claims)
	maps.DeleteFunc(t.q.Claims, func(_, v string) bool { return v == id })
	if len(t.q.Claims) != n {
		t.qDirty = true
	}
}

// Keys of the pools.
const poolsSet = "pools"

func poolKey(id string) string { return "pool:" + id }
func idleKey(id string) string { return "idle:" + id }
func liveKey(id string) string { return "live:" + id }

// Pool is a class of interchangeable workers: the same binding and capabilities.
type Pool struct {
	ID           string              `json:"-"`
	Binding      *bridge.Binding     `json:"binding,omitempty"`
	Capabilities bridge.Capabilities `json:"capabilities"`
}

// poolID names the pool of a registration.
func poolID(b *bridge.Binding, capsJSON []byte) string {
	h := sha256.New()
	if b != nil {
		h.Write(encode(b))
	}
	h.Write([]byte{0})
	h.Write(capsJSON)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

func ms(t time.Time) float64 { return float64(t.UnixMilli()) }

// syncPools keeps the worker's place in its pool's sets after its registration, readiness or slots
// changed: live while registered, idle while dispatchable with a free slot. A worker that moved pools
// (new capabilities) leaves the old one's sets.
func (t *wtx) syncPools() {
	if t.prevPool != "" && (t.reg == nil || t.reg.Pool != t.prevPool) {
		t.tx.ZRem(idleKey(t.prevPool), t.w)
		t.tx.ZRem(liveKey(t.prevPool), t.w)
	}
	if t.reg == nil || t.reg.Pool == "" {
		return
	}
	pool := t.reg.Pool
	if t.regDirty {
		t.tx.ZAdd(liveKey(pool), t.w, ms(t.reg.ExpiresAt), false)
		t.tx.ZRemBelow(liveKey(pool), ms(t.now))
	}
	if t.isReady() && !t.busy() {
		t.tx.ZAdd(idleKey(pool), t.w, ms(t.now), true)
	} else if !t.notIdle {
		t.tx.ZRem(idleKey(pool), t.w)
	}
}

// Pools implements Store: every pool a worker registered into.
func (p *Protocol) Pools(ctx context.Context) ([]Pool, error) {
	ids, err := p.members(ctx, "pools", poolsSet)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	slices.Sort(ids)
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = poolKey(id)
	}
	vals, err := p.read(ctx, "pools", keys...)
	if err != nil {
		return nil, err
	}
	out := make([]Pool, 0, len(ids))
	for i, v := range vals {
		pl, err := decode[Pool](v, "pool")
		if err != nil {
			return nil, err
		}
		if pl != nil {
			pl.ID = ids[i]
			out = append(out, *pl)
		}
	}
	return out, nil
}

// TakeIdle implements Store: the pool's longest-idle worker, taken out of its idle set.
func (p *Protocol) TakeIdle(ctx context.Context, pool string) (string, bool, error) {
	w, ok, err := p.b.ZPopMin(ctx, idleKey(pool))
	return w, ok, p.observe("take_idle", readErr(err))
}

// Online implements Store: how many of the pool's workers are registered.
func (p *Protocol) Online(ctx context.Context, pool string) (int, error) {
	n, err := p.b.ZCount(ctx, liveKey(pool), ms(p.b.Now()))
	return n, p.observe("online", readErr(err))
}
