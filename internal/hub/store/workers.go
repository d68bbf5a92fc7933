package store

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// Register implements Store (§7.2).
func (p *Protocol) Register(ctx context.Context, rp RegisterParams) (*Registration, error) {
	var out Registration
	err := p.update(ctx, "register", rp.WorkerID, func(t *wtx) error {
		rec, inc := t.rec, rp.IncarnationID
		// 1. The credential is still the worker's live one (the hub may have checked a cached copy).
		if err := rp.Auth.Confirm(t.rec, t.now); err != nil {
			return Abort(err)
		}
		// 2. This incarnation's own marks.
		if err := t.marks(inc); err != nil {
			return err
		}
		// 3. One active incarnation.
		if len(t.slots.Active) > 0 {
			if (t.reg != nil && t.reg.IncarnationID != inc) || (t.reg == nil && t.heldByOther(inc)) {
				return bridge.ErrWorkerBusy
			}
		}
		// 4. Fence the previous incarnation; advance the generation.
		if rec.RegOwner != inc {
			t.takeOver(inc)
		}
		// 5. Store the registration. A worker that was not registered is dispatchable now (or once ready).
		pool := poolID(rp.Auth.Binding, rp.CapabilitiesJSON)
		if t.unchanged(rp, pool) {
			// A heartbeat in the first half of the registration's life that changes nothing writes
			// nothing: the store pays one read for it (the next one renews).
			out = *t.reg
			out.RegisteredAt = t.now
			return nil
		}
		if t.reg == nil || t.reg.IncarnationID != inc || t.reg.Pool != pool {
			t.joinPool(pool, rp)
		}
		t.reg = &Registration{
			WorkerID: rp.WorkerID, IncarnationID: inc, Generation: rec.RegGeneration, RegisteredAt: t.now,
			ExpiresAt: t.now.Add(p.leaseTTL), LeaseTTL: p.leaseTTL, Capabilities: rp.Capabilities,
			CapabilitiesJSON: slices.Clone(rp.CapabilitiesJSON), IdentityID: rp.Auth.IdentityID, Binding: rp.Auth.Binding,
			Slots: min(max(rp.Slots, 1), MaxSlots), Pool: pool,
		}
		t.regDirty = true
		// The index only lists candidates; Workers checks each registration.
		t.tx.SetAdd(WorkersSet, rp.WorkerID)
		out = *t.reg
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// unchanged reports a registration identical to the stored one, which has more than half its life left.
func (t *wtx) unchanged(rp RegisterParams, pool string) bool {
	r := t.reg
	return r != nil && r.IncarnationID == rp.IncarnationID && t.rec.RegOwner == rp.IncarnationID && r.Pool == pool &&
		r.Slots == min(max(rp.Slots, 1), MaxSlots) && r.IdentityID == rp.Auth.IdentityID &&
		string(r.CapabilitiesJSON) == string(rp.CapabilitiesJSON) && r.ExpiresAt.Sub(t.now) > t.p.leaseTTL/2
}

// joinPool records the pool a (new or changed) registration belongs to, and tells the hubs (their pool
// catalogs, and clients queued for capacity).
func (t *wtx) joinPool(pool string, rp RegisterParams) {
	t.tx.Put(poolKey(pool), encode(Pool{Binding: rp.Auth.Binding, Capabilities: rp.Capabilities}), Volatile, time.Time{})
	t.tx.SetAdd(poolsSet, pool)
	t.tx.Notify(TopicPools)
	t.tx.Notify(TopicFree)
}

// takeOver makes inc the registration owner: the previous owner is fenced,
// the generation advances, work queued for other incarnations (by
// construction neither acked nor settled) is dropped, and readiness resets.
func (t *wtx) takeOver(inc string) {
	rec := t.rec
	if rec.RegOwner != "" {
		if rec.Fenced == nil {
			rec.Fenced = map[string]time.Time{}
		}
		rec.Fenced[rec.RegOwner] = t.now
		for k, ft := range rec.Fenced {
			if t.now.Sub(ft) > DefaultFenceRetention {
				delete(rec.Fenced, k)
			}
		}
	}
	rec.RegGeneration++
	rec.RegOwner = inc
	t.recDirty = true
	for qi := range t.q.Queues {
		if qi != inc {
			delete(t.q.Queues, qi)
			t.qDirty = true
		}
	}
	// The fenced incarnations' claims (settled ones stay until overwritten) go with their queues.
	if n := len(t.q.Claims); n > 0 {
		maps.DeleteFunc(t.q.Claims, func(ck, _ string) bool { return ck != inc && !strings.HasPrefix(ck, inc+"#") })
		t.qDirty = t.qDirty || len(t.q.Claims) != n
	}
	if t.ready != "" {
		t.ready, t.readyDirty = "", true
	}
	t.tx.Notify(TopicWorker(t.w))
}

// Ready implements Store (§3.4).
func (p *Protocol) Ready(ctx context.Context, workerID, incarnationID string, gen int64) error {
	return p.update(ctx, "ready", workerID, func(t *wtx) error {
		if err := t.marks(incarnationID); err != nil {
			return err
		}
		if t.reg == nil {
			return bridge.ErrWorkerOffline
		}
		if t.reg.IncarnationID != incarnationID || t.reg.Generation != gen {
			return bridge.ErrWorkerFenced
		}
		t.ready, t.readyDirty = readyMark(incarnationID, gen), true
		t.tx.Notify(TopicFree)
		return nil
	})
}

// Worker implements Store.
func (p *Protocol) Worker(ctx context.Context, workerID string) (*WorkerState, error) {
	sts, err := p.states(ctx, []string{workerID})
	if err != nil {
		return nil, err
	}
	return &sts[0], nil
}

// states reads several workers' snapshots in one consistent read.
func (p *Protocol) states(ctx context.Context, ids []string) ([]WorkerState, error) {
	keys := make([]string, 0, 4*len(ids))
	for _, w := range ids {
		keys = append(keys, recKey(w), regKey(w), readyKey(w), lockKey(w))
	}
	vals, err := p.read(ctx, "worker", keys...)
	if err != nil {
		return nil, err
	}
	out := make([]WorkerState, len(ids))
	for i, w := range ids {
		v := vals[4*i : 4*i+4]
		rec, err := decode[WorkerRecord](v[0], "worker record")
		if err != nil {
			return nil, err
		}
		reg, err := decode[Registration](v[1], "registration")
		if err != nil {
			return nil, err
		}
		if reg != nil && p.locallyQuarantined(w, reg.IncarnationID) {
			reg = nil
		}
		slots, err := decode[slotsRec](v[3], "slots")
		if err != nil {
			return nil, err
		}
		active, capacity := len(loadSlots(slots, p.b.Now()).Active), 1
		if reg != nil && reg.Slots > 1 {
			capacity = reg.Slots
		}
		st := WorkerState{WorkerID: w, Online: reg != nil, Ready: isReady(reg, string(v[2])), Busy: active >= capacity,
			Active: active, Registration: reg}
		if rec != nil {
			st.Binding = rec.Binding
		}
		out[i] = st
	}
	return out, nil
}

// Workers implements Store: every worker with a live registration.
func (p *Protocol) Workers(ctx context.Context) ([]WorkerState, error) {
	ids, err := p.members(ctx, "workers", WorkersSet)
	if err != nil {
		return nil, err
	}
	sort.Strings(ids)
	all, err := p.states(ctx, ids)
	if err != nil {
		return nil, err
	}
	var out []WorkerState
	for _, st := range all {
		if st.Online {
			out = append(out, st)
			continue
		}
		// Keep the index small: drop workers whose registration expired, atomically so that a concurrent
		// Register is not lost. One still holding a slot stays: a sweep finds a dead dispatcher's work here.
		_ = p.b.Update(ctx, func(tx Txn) error {
			v, err := tx.Get(regKey(st.WorkerID), lockKey(st.WorkerID))
			if err == nil && v[0] == nil && v[1] == nil {
				tx.SetRemove(WorkersSet, st.WorkerID)
			}
			return err
		})
	}
	return out, nil
}
