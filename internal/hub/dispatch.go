package hub

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// waiter is one client request queued because every eligible worker was busy.
type waiter struct{ tenant string }

// clientError is a client-facing failure, rendered by the exec or chat
// handler in its own envelope.
type clientError struct {
	status     int
	code       string // exec: error field; chat: error.code
	message    string
	retryAfter int // seconds; 0 = no header
}

func (e *clientError) Error() string { return e.code + ": " + e.message }

func errUnavailable(msg string) *clientError {
	return &clientError{status: http.StatusServiceUnavailable, code: "worker_unavailable", message: msg, retryAfter: 5}
}

// dispatchReq is one client request to run on some worker.
type dispatchReq struct {
	caller       *ClientKey
	kind         string
	request      []byte // canonical {body, headers}
	sessionID    string // exec session: becomes runtimeSessionId on a stateful worker
	affinity     string // worker that ran the session before
	stateful     bool   // the session's state lives on affinity
	pinned       string // X-Codellm-Worker-Id
	runtimeLabel string // required capability label ("" = any)
	model        string // chat: prefer workers advertising model:<name>
	deadline     time.Time
	// accept, when set, must admit the worker's capabilities (workspace
	// tools: the operation, workspace, modes and features, §7.3 step 1).
	accept func(*bridge.Capabilities) bool
}

// outcome is a settled assignment.
type outcome struct {
	workerID    string
	incarnation string // the worker process that ran it
	caps        bridge.Capabilities
	stateful    bool
	status      string
	result      *bridge.Object
	errMsg      string
	errCode     string // workspace rejections (§9.9)
}

// admits applies §13.3's binding rule.
func (h *Hub) admits(b *bridge.Binding, k *ClientKey) bool {
	if b == nil {
		return !h.cfg.DynamicWorkers
	}
	if b.TenantID != k.TenantID {
		return false
	}
	switch b.Principal.Type {
	case "deployment", "tenant":
		return true
	case "user":
		return k.UserID != "" && k.UserID == b.Principal.ID
	case "role":
		return slices.Contains(k.Roles, b.Principal.ID)
	case "group":
		return slices.Contains(k.Groups, b.Principal.ID)
	}
	return false
}

// eligible lists the workers that may take d, idle ones first, least
// recently used first.
func (h *Hub) eligible(ctx context.Context, d *dispatchReq) ([]store.WorkerState, error) {
	all, err := h.store.Workers(ctx)
	if err != nil {
		return nil, err
	}
	var out []store.WorkerState
	for _, st := range all {
		if !st.Ready || st.Registration == nil || !h.admits(st.Binding, d.caller) {
			continue
		}
		caps := &st.Registration.Capabilities
		if d.runtimeLabel != "" && !caps.HasRuntime(d.runtimeLabel) {
			continue
		}
		if d.pinned != "" && st.WorkerID != d.pinned {
			continue
		}
		if d.stateful && (st.WorkerID != d.affinity || !caps.StatefulWorkspace) {
			continue
		}
		if d.accept != nil && !d.accept(caps) {
			continue
		}
		out = append(out, st)
	}
	if d.model != "" {
		label := "model:" + d.model
		if slices.ContainsFunc(out, func(s store.WorkerState) bool { return s.Registration.Capabilities.HasRuntime(label) }) {
			out = slices.DeleteFunc(out, func(s store.WorkerState) bool { return !s.Registration.Capabilities.HasRuntime(label) })
		}
	}
	h.mu.Lock()
	used := func(id string) time.Time { return h.lastUsed[id] }
	slices.SortStableFunc(out, func(a, b store.WorkerState) int {
		if a.Busy != b.Busy {
			if a.Busy {
				return 1
			}
			return -1
		}
		if a.WorkerID == d.affinity && b.WorkerID != d.affinity {
			return -1
		}
		if b.WorkerID == d.affinity && a.WorkerID != d.affinity {
			return 1
		}
		return used(a.WorkerID).Compare(used(b.WorkerID))
	})
	h.mu.Unlock()
	return out, nil
}

func (h *Hub) joinQueue(tenant string) (*waiter, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queues[tenant]) >= h.cfg.QueueMax {
		return nil, false
	}
	w := &waiter{tenant: tenant}
	h.queues[tenant] = append(h.queues[tenant], w)
	return w, true
}

func (h *Hub) leaveQueue(w *waiter) {
	if w == nil {
		return
	}
	h.mu.Lock()
	q := slices.DeleteFunc(h.queues[w.tenant], func(x *waiter) bool { return x == w })
	if len(q) == 0 {
		delete(h.queues, w.tenant)
	} else {
		h.queues[w.tenant] = q
	}
	h.mu.Unlock()
	h.waits.wake(store.TopicFree) // the next waiter may now be at the head
}

// atHead reports whether w may try to dispatch (FIFO per tenant).
func (h *Hub) atHead(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[w.tenant]
	return len(q) > 0 && q[0] == w
}

func rateLimited(wait time.Duration) *clientError {
	secs := max(1, int(wait.Seconds()+0.999))
	return &clientError{status: http.StatusTooManyRequests, code: "rate_limited", message: "All eligible workers are busy", retryAfter: secs}
}

// dispatch runs d on one worker and returns its settlement (§7.3, §13.3–§13.5).
func (h *Hub) dispatch(ctx context.Context, d *dispatchReq) (*outcome, error) {
	var w *waiter
	defer func() { h.leaveQueue(w) }()
	queueUntil := time.Now().Add(h.cfg.QueueTimeout)
	if d.deadline.Before(queueUntil) {
		queueUntil = d.deadline
	}
	for {
		out, err, again := h.dispatchOnce(ctx, d, &w, queueUntil)
		if !again {
			return out, err
		}
	}
}

// dispatchOnce makes one attempt: it tries the eligible workers (the request's turn come: first in its
// tenant's queue), queues the request, and waits for capacity; again means try once more.
func (h *Hub) dispatchOnce(ctx context.Context, d *dispatchReq, w **waiter, queueUntil time.Time) (out *outcome, err error, again bool) {
	ch, release := h.waits.watch(store.TopicFree)
	defer release()
	cands, err := h.eligible(ctx, d)
	if err != nil {
		return nil, err, false
	}
	if len(cands) == 0 {
		return nil, h.noWorker(ctx, d), false
	}
	if *w == nil || h.atHead(*w) {
		for _, c := range cands {
			out, err := h.tryWorker(ctx, d, c)
			if errors.Is(err, bridge.ErrWorkerBusy) || errors.Is(err, bridge.ErrWorkerOffline) {
				continue
			}
			if errors.Is(err, errReassign) {
				return nil, nil, true // re-read the worker list from the top
			}
			return out, err, false
		}
	}
	if *w == nil {
		var ok bool
		if *w, ok = h.joinQueue(d.caller.TenantID); !ok {
			return nil, rateLimited(h.cfg.QueueTimeout), false
		}
	}
	if !time.Now().Before(queueUntil) {
		return nil, rateLimited(h.cfg.QueueTimeout), false
	}
	if !h.sleep(ctx, ch, min(h.cfg.PollInterval, time.Until(queueUntil))) {
		return nil, errUnavailable("Request abandoned"), false
	}
	return nil, nil, true
}

// noWorker is the answer when no worker is eligible at all (503), or when the one pinned refuses.
func (h *Hub) noWorker(ctx context.Context, d *dispatchReq) error {
	if d.pinned != "" {
		// A pinned worker that is up but whose binding refuses this caller is a 403, not an outage (§13.5).
		if st, err := h.store.Worker(ctx, d.pinned); err == nil && st.Ready {
			if !h.admits(st.Binding, d.caller) {
				return bridge.ErrWorkerUnauthorized
			}
			if d.accept != nil && !d.accept(&st.Registration.Capabilities) {
				return bridge.ErrWorkerMismatch
			}
		}
	}
	if d.stateful {
		return errUnavailable("The session's worker " + d.affinity + " is not available; a stateful session's files live on it and cannot move to another worker")
	}
	return errUnavailable("No eligible worker is online")
}

// unenqueue settles an Enqueue whose outcome the store did not report (its reply was lost): the
// assignment may exist, and a worker may lease it as soon as the store answers again. It is withdrawn,
// retried until the deadline; only then is the outage answered as one (503, nothing ran). One a worker
// acknowledged meanwhile may run, and one the store never confirmed gone may still: outcome unknown.
func (h *Hub) unenqueue(ctx context.Context, p store.EnqueueParams, cause error) error {
	bg := context.WithoutCancel(ctx)
	err := h.retryStore(p.ExpiresAt, func() error { return h.store.Withdraw(bg, p.WorkerID, p.AssignmentID) })
	if err == nil || errors.Is(err, bridge.ErrAssignmentNotFound) {
		return cause
	}
	return errOutcomeUnknown
}

// errReassign means the chosen worker vanished before acknowledging the
// assignment, which was withdrawn and may go elsewhere.
var errReassign = errors.New("hub: assignment withdrawn for reassignment")

func (h *Hub) tryWorker(ctx context.Context, d *dispatchReq, c store.WorkerState) (*outcome, error) {
	stateful := c.Registration.Capabilities.StatefulWorkspace && d.sessionID != ""
	p := store.EnqueueParams{
		WorkerID: c.WorkerID, AssignmentID: bridge.NewID(), ExpiresAt: d.deadline,
		ExecutionKind: d.kind, Request: d.request,
	}
	if h.replica != nil {
		p.Dispatcher = h.replica.id
	}
	p.LeaseToken = bridge.NewSecret()
	p.LeaseTokenHash = bridge.HashSecret(p.LeaseToken)
	if stateful {
		p.RuntimeSessionID = d.sessionID
	}
	a, err := h.store.Enqueue(ctx, p)
	if errors.Is(err, store.ErrUnavailable) {
		return nil, h.unenqueue(ctx, p, err)
	}
	if err != nil {
		return nil, err
	}
	h.metrics.Assignments.WithLabelValues("enqueued").Inc()
	h.mu.Lock()
	h.lastUsed[c.WorkerID] = time.Now()
	h.mu.Unlock()
	st, err := h.await(ctx, a)
	h.metrics.Assignments.WithLabelValues(assignmentState(st, err)).Inc()
	if err != nil {
		return nil, err
	}
	o, perr := bridge.ParseObject(st.Canonical)
	if perr != nil {
		return nil, bridge.ErrResultInvalid
	}
	out := &outcome{workerID: c.WorkerID, incarnation: a.IncarnationID, caps: c.Registration.Capabilities, stateful: stateful, status: st.Status}
	if st.Status == bridge.StatusFulfilled {
		v, _ := o.Get("result")
		res, ok := v.(*bridge.Object)
		if !ok {
			return nil, bridge.ErrResultInvalid
		}
		out.result = res
	} else {
		v, _ := o.Get("error")
		out.errMsg, _ = v.(string)
		c, _ := o.Get("errorCode")
		out.errCode, _ = c.(string)
	}
	return out, nil
}

// assignmentState names how an enqueued assignment ended, for codellm_hub_assignments_total.
func assignmentState(st *store.Settlement, err error) string {
	switch {
	case err == nil && st != nil && (st.Status == bridge.StatusFulfilled || st.Status == bridge.StatusRejected):
		return st.Status
	case errors.Is(err, errReassign):
		return "withdrawn"
	case errors.Is(err, bridge.ErrAssignmentExpired):
		return "expired"
	case errors.Is(err, errOutcomeUnknown):
		return "worker_offline"
	}
	return "failed"
}

// await waits for the settlement of a until its deadline (§7.3 step 4). A client that goes away sets the
// cancellation mark; the wait then continues so the worker's rejection is collected and the lock released.
// Once the worker may have started the run (it acknowledged it) the request never ends in a status that
// invites a retry: a run that cannot be accounted for is errOutcomeUnknown, never a 503 or a second run.
func (h *Hub) await(ctx context.Context, a *store.Assignment) (*store.Settlement, error) {
	w := &awaiting{a: a, clientGone: ctx.Done(), closing: h.closing}
	bg := context.WithoutCancel(ctx)
	for {
		if st, err, done := h.awaitOnce(bg, w); done {
			return st, err
		}
	}
}

// awaiting is one dispatcher's wait for its settlement.
type awaiting struct {
	a                   *store.Assignment
	clientGone, closing <-chan struct{} // nil once handled
}

// awaitOnce reads the assignment's state once and sleeps until its settlement is notified, the backstop,
// the client going away or the hub closing; done says the wait is over.
func (h *Hub) awaitOnce(ctx context.Context, w *awaiting) (*store.Settlement, error, bool) {
	a := w.a
	ch, release := h.waits.watch(store.TopicAssignment(a.ID))
	defer release()
	var st *store.Settlement
	var ws *store.WorkerState
	// A store outage shorter than the deadline loses nothing: keep asking until the assignment's deadline.
	err := h.retryStore(a.ExpiresAt, func() (err error) {
		if st, err = h.store.Settlement(ctx, a.WorkerID, a.ID); err == nil && st == nil {
			ws, err = h.store.Worker(ctx, a.WorkerID)
		}
		return err
	})
	if err != nil && !errors.Is(err, store.ErrUnavailable) {
		return nil, err, true
	}
	if st != nil || !time.Now().Before(a.ExpiresAt) {
		st, err := h.complete(ctx, a)
		return st, err, true
	}
	if ws != nil && (!ws.Online || (ws.Registration != nil && ws.Registration.IncarnationID != a.IncarnationID)) {
		st, err := h.lost(ctx, a)
		return st, err, true
	}
	t := time.NewTimer(min(h.cfg.PollInterval, time.Until(a.ExpiresAt)))
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-w.clientGone:
		// Client disconnected (§13.4): cancel, keep collecting.
		_ = h.store.Cancel(ctx, a.WorkerID, a.ID)
		w.clientGone = nil
	case <-w.closing:
		// Shutting down: work not yet acknowledged is taken back (503, nothing ran); a run under way is
		// waited for within the drain's grace.
		w.closing = nil
		if h.store.Withdraw(ctx, a.WorkerID, a.ID) == nil {
			return nil, errUnavailable("Hub is shutting down"), true
		}
	}
	return nil, nil, false
}

// errOutcomeUnknown: the worker acknowledged the assignment (so it may have run) and then went silent past
// its registration, or the store could not tell how it ended. The request fails without being run again
// (502 outcome_unknown) — a 503 or 429 would tell the client that nothing ran.
var errOutcomeUnknown = errors.New("hub: the run's outcome is unknown")

// lost ends an assignment whose worker vanished (its registration lapsed, or another incarnation took
// over): work it never acknowledged is taken back and may go to another worker (errReassign); work it
// acknowledged ends with its settlement if one arrived meanwhile, else failed with an unknown outcome. Its
// lock stays until deadline + grace, so the worker, should it come back, is not given more work while it
// may still be running this.
func (h *Hub) lost(ctx context.Context, a *store.Assignment) (*store.Settlement, error) {
	if err := h.store.Withdraw(ctx, a.WorkerID, a.ID); err == nil {
		return nil, errReassign
	}
	st, err := h.complete(ctx, a)
	if st != nil {
		return st, err
	}
	return nil, errOutcomeUnknown
}

func (h *Hub) complete(ctx context.Context, a *store.Assignment) (st *store.Settlement, err error) {
	// Complete is idempotent once it collected a settlement, so it is
	// retried through a short outage (a little past the deadline).
	_ = h.retryStore(time.Now().Add(2*time.Second), func() error {
		st, err = h.store.Complete(ctx, a.WorkerID, a.ID)
		return err
	})
	if errors.Is(err, store.ErrUnavailable) {
		// The worker may have run it; the store cannot say. Not a 503: a retry would run it again.
		return nil, errOutcomeUnknown
	}
	return st, err
}

// deadline computes the request deadline from the default and the
// X-Codellm-Timeout-Ms header (§13.4).
func (h *Hub) deadline(r *http.Request, def time.Duration) (time.Time, error) {
	d := def
	if v := r.Header.Get("X-Codellm-Timeout-Ms"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			return time.Time{}, errors.New("X-Codellm-Timeout-Ms must be a positive integer")
		}
		d = min(time.Duration(ms)*time.Millisecond, h.cfg.MaxTimeout)
	}
	return time.Now().Add(d), nil
}

// mapDispatchError turns store and dispatch errors into client errors (§13.5).
func mapDispatchError(err error) *clientError {
	var ce *clientError
	if errors.As(err, &ce) {
		return ce
	}
	switch {
	case errors.Is(err, errOutcomeUnknown):
		return &clientError{status: http.StatusBadGateway, code: "outcome_unknown", message: "The worker stopped answering after it started the run " +
			"(or the hub's store could not say how it ended); it may have run, so it was not run again"}
	case errors.Is(err, store.ErrUnavailable):
		return errStoreUnavailable()
	case errors.Is(err, bridge.ErrAssignmentExpired):
		return &clientError{status: http.StatusGatewayTimeout, code: "execution_timeout", message: "Execution did not finish before the deadline"}
	case errors.Is(err, bridge.ErrWorkerOffline), errors.Is(err, bridge.ErrWorkerMismatch):
		return errUnavailable("The selected worker is no longer available")
	case errors.Is(err, bridge.ErrWorkerUnauthorized):
		return &clientError{status: http.StatusForbidden, code: "forbidden", message: "No worker may serve this caller"}
	case errors.Is(err, bridge.ErrWorkspaceQuarantined):
		return &clientError{status: http.StatusConflict, code: "session_quarantined", message: "The session's workspace is quarantined"}
	case errors.Is(err, bridge.ErrResultInvalid):
		return &clientError{status: http.StatusBadGateway, code: "execution_failed", message: "The worker returned an invalid result"}
	case errors.Is(err, bridge.ErrAssignmentInvalid):
		return &clientError{status: http.StatusBadRequest, code: "invalid_request", message: "Invalid assignment"}
	case errors.Is(err, context.Canceled):
		return &clientError{status: 499, code: "cancelled", message: "Client closed the request"}
	}
	return &clientError{status: http.StatusInternalServerError, code: "internal_error", message: "Internal hub error"}
}

// fail maps a dispatch error and logs the ones that are the hub's fault.
func (h *Hub) fail(err error) *clientError {
	ce := mapDispatchError(err)
	if ce.status == http.StatusInternalServerError {
		h.cfg.Logger.Error("dispatch failed", "err", err)
	}
	return ce
}
