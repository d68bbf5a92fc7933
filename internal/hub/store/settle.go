package store

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/codellm/codellm/internal/bridge"
)

// Settle implements Store (§7.3 settle). A settlement is stored once: a
// resend of the same canonical bytes is an idempotent success, different
// bytes are fenced.
func (p *Protocol) Settle(ctx context.Context, sp SettleParams) error {
	// The settling worker is nearly always the owner: read its records, the owner mark and the assignment
	// in one step; only another worker's assignment takes a second read of the owner's.
	err := p.settleOn(ctx, sp.WorkerID, sp)
	var other *otherOwner
	if !errors.As(err, &other) {
		return err
	}
	if other.owner == "" {
		return bridge.ErrAssignmentNotFound
	}
	if err := p.settleOn(ctx, other.owner, sp); !errors.As(err, &other) {
		return err
	}
	return bridge.ErrAssignmentNotFound // the owner changed meanwhile: the assignment is gone
}

// otherOwner aborts a settlement run on a worker that does not own the assignment.
type otherOwner struct{ owner string }

func (o *otherOwner) Error() string { return "assignment owned by " + o.owner }

// settleOn applies the settlement as worker owner's transaction.
func (p *Protocol) settleOn(ctx context.Context, owner string, sp SettleParams) error {
	ok := ownerKey(sp.AssignmentID)
	return p.update(ctx, "settle", owner, func(t *wtx) error {
		// The settling worker's credential is confirmed on its own records: the first run is on them, and
		// another owner's run follows only after it passed.
		if owner == sp.WorkerID {
			if err := sp.Auth.Confirm(t.rec, t.now); err != nil {
				return Abort(err)
			}
		}
		if cur := string(t.pre[ok]); cur != owner {
			return Abort(&otherOwner{owner: cur})
		}
		a, err := t.asg(sp.AssignmentID)
		if err != nil {
			return err
		}
		if a == nil {
			return bridge.ErrAssignmentNotFound
		}
		if err := t.settleChecks(a, owner, sp); errors.Is(err, errAlreadySettled) {
			return nil
		} else if err != nil {
			return err
		}
		// The workspace's state is known once the settlement is stored: a rejection discards the run, a
		// fulfilled result commits it (§7.3 step 6, done here rather than by the dispatcher, so that a
		// dispatcher that died does not leave the session quarantined).
		if a.A.RuntimeSessionID != "" {
			a.Committed = t.clearFenceIfNamed(&a.A) && sp.Status == bridge.StatusFulfilled
		}
		a.Settlement = &Settlement{Status: sp.Status, Canonical: slices.Clone(sp.Canonical)}
		// The lease claim stays: spent once the slot is released below, it is passed over by leases and
		// overwritten by the next dispatch, so the settlement does not rewrite the queue record.
		a.Acked = false
		t.putAsg(a)
		// The run is over: the worker is free now, whether or not its dispatcher is still there to
		// collect the result.
		t.releaseLock(a.A.ID)
		t.tx.NotifyAt(a.A.Dispatcher, TopicAssignment(a.A.ID))
		// Nothing is left for a sweeper to finish should the dispatcher die now, so the assignment leaves
		// its dispatcher's list here, and collecting the settlement (Complete) writes nothing.
		t.undispatch(a)
		a.A.Dispatcher = ""
		return nil
	}, ok, asgKey(owner, sp.AssignmentID))
}

// errAlreadySettled is settleChecks' verdict for an identical resend.
var errAlreadySettled = errors.New("already settled with these bytes")

// settleChecks applies steps 1–6 of §7.3 settle.
func (t *wtx) settleChecks(a *asgRec, owner string, sp SettleParams) error {
	// 1. Idempotency on the canonical bytes.
	if a.Settlement != nil {
		if string(a.Settlement.Canonical) == string(sp.Canonical) {
			return errAlreadySettled
		}
		return bridge.ErrAssignmentFenced
	}
	// 3. Another worker's assignment.
	if owner != sp.WorkerID {
		return bridge.ErrWorkerMismatch
	}
	// 4. Fencing fields.
	if a.A.IncarnationID != sp.IncarnationID || t.rec.RegOwner != sp.IncarnationID || a.A.Generation != sp.Generation ||
		a.A.LeaseTokenHash != sp.LeaseTokenHash || (sp.IdentityID != "" && a.A.IdentityID != sp.IdentityID) {
		return bridge.ErrAssignmentFenced
	}
	// 5. Deadline.
	if sp.Status == bridge.StatusFulfilled && !t.now.Before(a.A.ExpiresAt) {
		return bridge.ErrAssignmentExpired
	}
	// 6. Workspace fence of a stateful assignment.
	if sid := a.A.RuntimeSessionID; sid != "" && t.rec.WorkspaceFences[sessionKey(sid)] != a.A.ID {
		return bridge.ErrWorkspaceQuarantined
	}
	return nil
}

// Complete implements Store (§7.3 dispatch steps 4, 6 and 7) as one
// transaction. When finalising a stateful result cannot be stored, the
// fence stays (the session remains quarantined) and the incarnation is
// quarantined (§10.3, fail closed).
func (p *Protocol) Complete(ctx context.Context, workerID, assignmentID string) (*Settlement, error) {
	return p.complete(ctx, workerID, assignmentID, false)
}

// Collect implements Store: Complete once a settlement is stored, and before that nothing (no write).
func (p *Protocol) Collect(ctx context.Context, workerID, assignmentID string) (*Settlement, error) {
	return p.complete(ctx, workerID, assignmentID, true)
}

// complete is Complete; with settledOnly an assignment without a settlement is left as it is (nil, nil).
func (p *Protocol) complete(ctx context.Context, workerID, assignmentID string, settledOnly bool) (*Settlement, error) {
	var out *Settlement
	var commitsSession bool
	var inc string
	err := p.updateAsg(ctx, "complete", workerID, assignmentID, func(t *wtx) error {
		out, commitsSession = nil, false
		a, err := t.asg(assignmentID)
		if err != nil {
			return err
		}
		if a != nil && a.Settlement != nil && (a.Completed || a.A.Dispatcher == "") && !sessionUncommitted(a) {
			// Collected before, or settled by a Settle that finished everything itself.
			st := *a.Settlement
			out = &st
			return nil
		}
		if settledOnly && (a == nil || a.Settlement == nil) {
			return nil
		}
		if a == nil || a.Finished {
			return bridge.ErrAssignmentExpired
		}
		inc = a.A.IncarnationID
		a.Finished = true
		t.putAsg(a)
		t.unqueue(inc, assignmentID)
		if a.Settlement != nil {
			return t.completeSettled(a, &out, &commitsSession)
		}
		// Expired without a settlement.
		a.Cancelled = true
		if !a.Acked {
			t.dropClaims(assignmentID)
		}
		if a.Acked {
			// Acked but never settled: the worker may still be running it,
			// so the fence and the lock stay until they expire.
			t.undispatch(a)
			return bridge.ErrAssignmentExpired
		}
		t.clearFenceIfNamed(&a.A)
		t.releaseLock(assignmentID)
		t.dropAsg(assignmentID)
		return bridge.ErrAssignmentExpired
	})
	if err != nil && !isProtocolErr(err) {
		if commitsSession {
			p.quarantine(context.WithoutCancel(ctx), workerID, inc)
		}
		return nil, err
	}
	if err != nil && !errors.Is(err, bridge.ErrWorkspaceQuarantined) {
		return nil, err
	}
	return out, err
}

// completeSettled finishes a settled assignment; the record stays until
// deadline + grace so that a resent settlement still gets its idempotent 200.
func (t *wtx) completeSettled(a *asgRec, out **Settlement, commitsSession *bool) error {
	st := *a.Settlement
	*out = &st
	t.releaseLock(a.A.ID)
	t.undispatch(a)
	if sessionUncommitted(a) {
		// Settled before settlements committed sessions themselves.
		*commitsSession = true
		if !t.clearFenceIfNamed(&a.A) {
			return bridge.ErrWorkspaceQuarantined
		}
	}
	a.Completed = true
	return nil
}

// sessionUncommitted reports a fulfilled stateful settlement whose session Settle did not commit (its
// fence named another run, or an older hub stored it).
func sessionUncommitted(a *asgRec) bool {
	return a.Settlement.Status == bridge.StatusFulfilled && a.A.RuntimeSessionID != "" && !a.Committed
}

// Abandon implements Store: it ends what dispatcher waited for — the assignments whose slot names it, and
// those on its list (kept by hubs of an older release).
func (p *Protocol) Abandon(ctx context.Context, dispatcher string) (int, error) {
	n, err := p.abandonListed(ctx, dispatcher)
	if err != nil {
		return n, err
	}
	m, err := p.abandonHeld(ctx, dispatcher)
	return n + m, err
}

// abandonBatch is how many workers' locks one read of a sweep fetches.
const abandonBatch = 256

// abandonHeld completes every assignment whose slot names dispatcher. The workers are found through the
// worker index, which keeps a worker while it holds a slot even after its registration lapsed: a sweep
// costs a read per abandonBatch workers, paid once per dead replica instead of two writes per assignment.
func (p *Protocol) abandonHeld(ctx context.Context, dispatcher string) (int, error) {
	workers, err := p.members(ctx, "abandon", WorkersSet)
	if err != nil {
		return 0, err
	}
	n := 0
	for batch := range slices.Chunk(workers, abandonBatch) {
		keys := make([]string, len(batch))
		for i, w := range batch {
			keys[i] = lockKey(w)
		}
		vals, err := p.read(ctx, "abandon", keys...)
		if err != nil {
			return n, err
		}
		for i, v := range vals {
			slots, err := decode[slotsRec](v, "slots")
			if err != nil || slots == nil {
				continue // a lock that cannot be read holds nothing a sweep could end
			}
			for id, r := range loadSlots(slots, p.b.Now()).Active {
				if r.Dispatcher != dispatcher {
					continue
				}
				if _, err := p.Complete(ctx, batch[i], id); err != nil && !isProtocolErr(err) {
					return n, err
				}
				n++
			}
		}
	}
	return n, nil
}

// abandonListed completes the assignments on dispatcher's list.
func (p *Protocol) abandonListed(ctx context.Context, dispatcher string) (int, error) {
	members, err := p.members(ctx, "abandon", dispatchedSet(dispatcher))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range members {
		w, id, ok := strings.Cut(m, " ")
		if !ok {
			continue
		}
		_, err := p.Complete(ctx, w, id)
		if err != nil && !isProtocolErr(err) {
			return n, err
		}
		// Complete took it off the list; an assignment whose record expired meanwhile is taken off here.
		if err := p.b.Update(ctx, func(tx Txn) error { tx.SetRemove(dispatchedSet(dispatcher), m); return nil }); err != nil {
			return n, p.observe("abandon", err)
		}
		n++
	}
	return n, nil
}
