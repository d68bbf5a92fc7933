package store

import (
	"context"
	"errors"
	"slices"

	"github.com/codellm/codellm/internal/bridge"
)

// fencedBy says why a session whose workspace fence names assignment id cannot take another run now. A
// run of the session still in progress (its slot held, unsettled, unfinished, before its deadline) makes
// the worker busy for the session: the new run waits for it, as a session's runs are serial (LibreChat
// sends a conversation's parallel tool calls in one session). Anything else left the workspace
// quarantined.
func (t *wtx) fencedBy(id string) error {
	if _, running := t.slots.Active[id]; running {
		a, err := t.asg(id)
		if err != nil {
			return err
		}
		if a != nil && a.Settlement == nil && !a.Finished && t.now.Before(a.A.ExpiresAt) {
			return bridge.ErrWorkerBusy
		}
	}
	return bridge.ErrWorkspaceQuarantined
}

// Enqueue implements Store (§7.3 dispatch steps 1–3).
func (p *Protocol) Enqueue(ctx context.Context, ep EnqueueParams) (*Assignment, error) {
	var out Assignment
	err := p.update(ctx, "enqueue", ep.WorkerID, func(t *wtx) error {
		if !t.isReady() {
			return bridge.ErrWorkerOffline
		}
		rec := t.rec
		if ep.RuntimeSessionID != "" && !t.reg.Capabilities.StatefulWorkspace {
			return bridge.ErrWorkerMismatch
		}
		if fence := rec.WorkspaceFences[sessionKey(ep.RuntimeSessionID)]; ep.RuntimeSessionID != "" && fence != "" {
			return t.fencedBy(fence)
		}
		t.notIdle = ep.FromIdle
		if t.busy() {
			return bridge.ErrWorkerBusy
		}
		if t.pre[ownerKey(ep.AssignmentID)] != nil {
			return bridge.ErrAssignmentInvalid
		}
		gen := t.nextGeneration()
		if ep.RuntimeSessionID != "" {
			if rec.WorkspaceFences == nil {
				rec.WorkspaceFences = map[string]string{}
			}
			rec.WorkspaceFences[sessionKey(ep.RuntimeSessionID)] = ep.AssignmentID
			t.recDirty = true
		}
		inc := t.reg.IncarnationID
		a := Assignment{
			ID: ep.AssignmentID, WorkerID: ep.WorkerID, IncarnationID: inc, Generation: gen,
			LeaseToken: ep.LeaseToken, LeaseTokenHash: ep.LeaseTokenHash, IdentityID: t.reg.IdentityID, ExpiresAt: ep.ExpiresAt,
			RuntimeSessionID: ep.RuntimeSessionID, ExecutionKind: ep.ExecutionKind, Request: slices.Clone(ep.Request),
			Dispatcher: ep.Dispatcher,
		}
		gc := ep.ExpiresAt.Add(p.grace)
		t.occupy(a.ID, inc, a.Dispatcher, gc)
		t.handOut(inc, a.ID)
		t.putAsg(&asgRec{A: a, GCAt: gc, Unlisted: a.Dispatcher != ""})
		t.putUntil(ownerKey(a.ID), []byte(ep.WorkerID), gc)
		if s := ep.Session; s != nil {
			s.WorkerID, s.IncarnationID, s.LastUsed = ep.WorkerID, inc, t.now
			t.tx.Put(sessionRecKey(s.ID), encode(s), Durable, t.now.Add(SessionIdle))
		}
		t.tx.Notify(TopicWorkQueued(ep.WorkerID, a.ID))
		out = a
		return nil
	}, ownerKey(ep.AssignmentID))
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// nextGeneration issues the next assignment generation (monotonic, §7.1):
// the persisted ceiling in the worker record is raised a block at a time.
func (t *wtx) nextGeneration() int64 {
	issued := t.q.Issued
	if issued == 0 {
		issued = t.rec.AssignGeneration
	}
	gen := issued + 1
	if gen > t.rec.AssignGeneration {
		t.rec.AssignGeneration = gen + t.p.block - 1
		t.recDirty = true
	}
	t.q.Issued, t.qDirty = gen, true
	return gen
}

// Lease implements Store (§7.3 lease).
func (p *Protocol) Lease(ctx context.Context, workerID, incarnationID, identityID string) (*Assignment, error) {
	return p.LeaseSlot(ctx, LeaseParams{WorkerID: workerID, IncarnationID: incarnationID, IdentityID: identityID, Slot: -1})
}

// LeaseSlot implements Store: Lease for one slot (slot < 0: a lease without one).
func (p *Protocol) LeaseSlot(ctx context.Context, lp LeaseParams) (*Assignment, error) {
	workerID, incarnationID, identityID, slot := lp.WorkerID, lp.IncarnationID, lp.IdentityID, lp.Slot
	// Fast path for the common empty poll: one read instead of a transaction. When it finds work, the
	// transaction reads that assignment together with the worker's records.
	var next []string
	if lp.Woken && lp.Queued != "" {
		next = []string{asgKey(workerID, lp.Queued)}
	}
	if !lp.Woken {
		id, err := p.leaseNext(ctx, lp)
		if err != nil || id == "" {
			return nil, err
		}
		next = []string{asgKey(workerID, id)}
	}
	var out *Assignment
	err := p.update(ctx, "lease", workerID, func(t *wtx) error {
		out = nil
		rec := t.rec
		if err := lp.Auth.Confirm(rec, t.now); err != nil {
			return Abort(err)
		}
		if _, f := rec.Fenced[incarnationID]; f || (rec.RegOwner != "" && rec.RegOwner != incarnationID) {
			return bridge.ErrWorkerFenced
		}
		if err := checkSlot(t.reg, slot); err != nil {
			return err
		}
		ck := claimKey(incarnationID, slot)
		for {
			id, ok := t.claim(incarnationID, ck)
			if !ok {
				return nil
			}
			a, err := t.asg(id)
			if err != nil {
				return err
			}
			if a == nil || a.A.WorkerID != workerID || a.A.IncarnationID != incarnationID ||
				(identityID != "" && a.A.IdentityID != identityID) || a.Finished || a.Settlement != nil {
				delete(t.q.Claims, ck)
				t.qDirty = true
				continue
			}
			if !t.now.Before(a.A.ExpiresAt) {
				delete(t.q.Claims, ck)
				t.qDirty = true
				if !a.Acked {
					t.clearFenceIfNamed(&a.A)
				}
				continue
			}
			o := a.A
			o.Slot = slot
			out = &o
			return nil
		}
	}, next...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errSlotNotNegotiated refuses a slot lease of a registration granted fewer than two slots: its work is
// handed to the incarnation's own claim, which only a lease without a slot reads (as the reference hub,
// which answers such a lease WORKER_MISMATCH).
var errSlotNotNegotiated = bridge.NewError(bridge.CodeWorkerMismatch,
	"Workspace lease slot was not negotiated: a registration with fewer than 2 lease slots leases without workspaceLeaseSlot")

// checkSlot refuses a lease slot the registration was not granted. Without a registration (it lapsed)
// there is nothing to lease and nothing to refuse: the worker registers again.
func checkSlot(reg *Registration, slot int) error {
	switch n := capacity(reg); {
	case reg == nil:
	case slot >= 0 && n < 2:
		return errSlotNotNegotiated
	case slot >= n:
		return bridge.Errorf(400, "Workspace lease slot exceeds negotiated capacity")
	}
	return nil
}

// claim returns the assignment claim ck holds, or claims the incarnation's next queued one for it. A claim
// whose assignment holds no slot any more (settled, withdrawn, past its time) is spent: it is passed over
// without a write, and overwritten when there is queued work.
func (t *wtx) claim(inc, ck string) (string, bool) {
	if id, claimed := t.q.Claims[ck]; claimed && t.liveClaim(id) {
		return id, true
	}
	q := t.q.Queues[inc]
	if len(q) == 0 {
		return "", false
	}
	if len(q) == 1 {
		delete(t.q.Queues, inc)
	} else {
		t.q.Queues[inc] = q[1:]
	}
	t.q.Claims[ck] = q[0]
	t.qDirty = true
	return q[0], true
}

// leaseNext returns, from one snapshot, the assignment the incarnation's slot would lease — its claim, or
// the head of its queue — or "" when there is none; the credential and fencing are checked on the same
// snapshot.
func (p *Protocol) leaseNext(ctx context.Context, lp LeaseParams) (string, error) {
	vals, err := p.read(ctx, "lease", recKey(lp.WorkerID), queueKey(lp.WorkerID), lockKey(lp.WorkerID), regKey(lp.WorkerID))
	if err != nil {
		return "", err
	}
	rec, err := decode[WorkerRecord](vals[0], "worker record")
	if err != nil {
		return "", err
	}
	reg, err := decode[Registration](vals[3], "registration")
	if err != nil {
		return "", err
	}
	if err := lp.Auth.Confirm(rec, p.b.Now()); err != nil {
		return "", err
	}
	if rec != nil {
		if _, f := rec.Fenced[lp.IncarnationID]; f || (rec.RegOwner != "" && rec.RegOwner != lp.IncarnationID) {
			return "", bridge.ErrWorkerFenced
		}
	}
	if err := checkSlot(reg, lp.Slot); err != nil {
		return "", err
	}
	q, err := decode[queueRec](vals[1], "queues")
	if err != nil || q == nil {
		return "", err
	}
	slots, err := decode[slotsRec](vals[2], "slots")
	if err != nil {
		return "", err
	}
	if id, claimed := q.Claims[claimKey(lp.IncarnationID, lp.Slot)]; claimed {
		if _, live := loadSlots(slots, p.b.Now()).Active[id]; live {
			return id, nil
		}
	}
	if queued := q.Queues[lp.IncarnationID]; len(queued) > 0 {
		return queued[0], nil
	}
	return "", nil
}

// Ack implements Store (§3.6).
func (p *Protocol) Ack(ctx context.Context, ap AckParams) error {
	return p.updateAsg(ctx, "ack", ap.WorkerID, ap.AssignmentID, func(t *wtx) error {
		if err := ap.Auth.Confirm(t.rec, t.now); err != nil {
			return Abort(err)
		}
		a, err := t.asg(ap.AssignmentID)
		if err != nil {
			return err
		}
		if a == nil || a.Finished || a.Settlement != nil || a.A.IncarnationID != ap.IncarnationID || t.rec.RegOwner != ap.IncarnationID ||
			a.A.Generation != ap.Generation || a.A.LeaseTokenHash != ap.LeaseTokenHash || !t.claimedBy(ap.IncarnationID, ap.AssignmentID) {
			return bridge.ErrAssignmentFenced
		}
		if !a.Acked {
			a.Acked = true
			t.putAsg(a)
		}
		return nil
	})
}

// Cancelled implements Store: true when the assignment is gone, fenced or
// cancelled.
func (p *Protocol) Cancelled(ctx context.Context, workerID, incarnationID, assignmentID string) (bool, error) {
	vals, err := p.read(ctx, "cancelled", recKey(workerID), asgKey(workerID, assignmentID))
	if err != nil {
		return false, err
	}
	rec, err := decode[WorkerRecord](vals[0], "worker record")
	if err != nil {
		return false, err
	}
	a, err := decode[asgRec](vals[1], "assignment")
	if err != nil {
		return false, err
	}
	return rec == nil || a == nil || a.A.IncarnationID != incarnationID || rec.RegOwner != incarnationID || a.Cancelled, nil
}

// Cancel implements Store.
func (p *Protocol) Cancel(ctx context.Context, workerID, assignmentID string) error {
	return p.updateAsg(ctx, "cancel", workerID, assignmentID, func(t *wtx) error {
		a, err := t.asg(assignmentID)
		if err != nil || a == nil || a.Cancelled {
			return err
		}
		a.Cancelled = true
		t.putAsg(a)
		return nil
	})
}

// Settlement implements Store.
func (p *Protocol) Settlement(ctx context.Context, workerID, assignmentID string) (*Settlement, error) {
	vals, err := p.read(ctx, "settlement", asgKey(workerID, assignmentID))
	if err != nil {
		return nil, err
	}
	a, err := decode[asgRec](vals[0], "assignment")
	if err != nil || a == nil {
		return nil, err
	}
	return a.Settlement, nil
}

// Withdraw implements Store.
func (p *Protocol) Withdraw(ctx context.Context, workerID, assignmentID string) error {
	return p.updateAsg(ctx, "withdraw", workerID, assignmentID, func(t *wtx) error {
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
		t.releaseLock(assignmentID)
		t.dropAsg(assignmentID)
		return nil
	})
}

// ResetWorkspace implements Store (§3.7).
func (p *Protocol) ResetWorkspace(ctx context.Context, workerID, incarnationID, runtimeSessionID string) error {
	return p.update(ctx, "reset_workspace", workerID, func(t *wtx) error {
		if _, f := t.rec.Fenced[incarnationID]; f || t.rec.RegOwner != incarnationID {
			return bridge.ErrWorkerFenced
		}
		if len(t.slots.Active) > 0 {
			return bridge.ErrWorkerBusy
		}
		if err := t.rebindSession(runtimeSessionID); err != nil {
			return err
		}
		k := sessionKey(runtimeSessionID)
		if _, ok := t.rec.WorkspaceFences[k]; !ok {
			return nil
		}
		delete(t.rec.WorkspaceFences, k)
		t.recDirty = true
		return nil
	})
}

// rebindSession: a reset acknowledges that the session's files are gone, so the session continues, empty,
// on whichever incarnation of this worker runs it next (`codellm worker reset-workspace` registers an
// incarnation of its own, and the worker it resets starts as another one) instead of being refused as lost.
func (t *wtx) rebindSession(sid string) error {
	k := sessionRecKey(sid)
	vals, err := t.tx.Get(k)
	if err != nil {
		return Abort(err)
	}
	s, err := decode[Session](vals[0], "session")
	if err != nil {
		return Abort(err)
	}
	if s == nil || s.WorkerID != t.w || s.IncarnationID == "" {
		return nil
	}
	s.IncarnationID, s.LastUsed = "", t.now
	t.tx.Put(k, encode(s), Durable, t.now.Add(SessionIdle))
	return nil
}

// isProtocolErr reports whether err is one of the bridge sentinels (a rule
// refused) rather than a storage failure.
func isProtocolErr(err error) bool {
	var be *bridge.Error
	return errors.As(err, &be)
}
