package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// clientError is a client-facing failure, rendered by the exec or chat
// handler in its own envelope.
type clientError struct {
	status     int
	code       string // exec: error field; chat: error.code
	message    string
	retryAfter int // seconds; 0 = no header
}

func (e *clientError) Error() string { return e.code + ": " + e.message }

// codeWorkerUnavailable is the code of a 503 that says no worker could take the request.
const codeWorkerUnavailable = "worker_unavailable"

func errUnavailable(msg string) *clientError {
	return &clientError{status: http.StatusServiceUnavailable, code: codeWorkerUnavailable, message: msg, retryAfter: 5}
}

// dispatchReq is one client request to run on some worker.
type dispatchReq struct {
	caller    *ClientKey
	kind      string
	request   []byte // canonical {body, headers}
	sessionID string // exec session: becomes runtimeSessionId on a stateful worker
	// session is the exec session's record to write with the assignment: a new session, or one whose
	// record is due for a refresh (store.SessionRefresh); nil: nothing to write.
	session *store.Session
	// enqueued is told when the request was handed to a worker (it leaves its queue then, not when its
	// run ends, so that the next waiting request may take the next free worker).
	enqueued     func()
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
	workerID string
	caps     bridge.Capabilities
	stateful bool
	status   string
	result   *bridge.Object
	errMsg   string
	errCode  string // workspace rejections (§9.9)
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

func rateLimited(wait time.Duration) *clientError {
	secs := max(1, int(wait.Seconds()+0.999))
	return &clientError{status: http.StatusTooManyRequests, code: "rate_limited", message: "All eligible workers are busy", retryAfter: secs}
}

// plan is where a request may run: one worker (pinned, or the stateful session's), or any worker of the
// eligible pools.
type plan struct {
	target string
	caps   bridge.Capabilities // the target's
	pools  []string
	// catalog is the pool copy the plan was made from (for the pools' capabilities).
	catalog []store.Pool
	// session is the stateful session the target holds ("" for none): a run of it waits for the
	// session's run in progress (its own FIFO), not behind the worker's other sessions.
	session string
}

// sig names the plan for the queue: requests with the same plan are interchangeable, so they wait in
// one FIFO (per tenant), and a request never waits behind one that needs other workers.
func (p *plan) sig() string {
	if p.target != "" {
		if p.session != "" {
			return "w:" + p.target + "/" + p.session
		}
		return "w:" + p.target
	}
	h := sha256.Sum256([]byte(strings.Join(p.pools, ",")))
	return hex.EncodeToString(h[:8])
}

// makePlan finds where d may run, or answers why nowhere: 503 when no worker could ever take it, 403 or
// 503 for a pinned worker that refuses it (§13.5).
func (h *Hub) makePlan(ctx context.Context, d *dispatchReq) (*plan, error) {
	if t := d.target(); t != "" {
		st, err := h.store.Worker(ctx, t)
		if err != nil {
			return nil, err
		}
		if !st.Ready || st.Registration == nil || (d.stateful && !st.Registration.Capabilities.StatefulWorkspace) {
			return nil, h.noWorker(d)
		}
		caps := &st.Registration.Capabilities
		if !h.admits(st.Binding, d.caller) {
			return nil, bridge.ErrWorkerUnauthorized
		}
		if (d.accept != nil && !d.accept(caps)) || (d.runtimeLabel != "" && !caps.HasRuntime(d.runtimeLabel)) {
			return nil, bridge.ErrWorkerMismatch
		}
		p := &plan{target: t, caps: *caps}
		if d.stateful && d.pinned == "" {
			p.session = d.sessionID
		}
		return p, nil
	}
	for fresh := false; ; fresh = true {
		catalog, err := h.pools.get(ctx, h.store)
		if err != nil {
			return nil, err
		}
		p := &plan{pools: h.eligiblePools(catalog, d), catalog: catalog}
		if len(p.pools) > 0 {
			return p, nil
		}
		if fresh {
			return nil, h.noWorker(d)
		}
		// Before refusing, make sure of it: the copy may predate the worker that would take d.
		h.pools.invalidate()
	}
}

// target is the one worker d must run on, if any.
func (d *dispatchReq) target() string {
	if d.pinned != "" {
		return d.pinned
	}
	if d.stateful {
		return d.affinity
	}
	return ""
}

// online reports whether any worker of the plan is registered (else waiting is pointless: 503).
func (h *Hub) online(ctx context.Context, p *plan) (bool, error) {
	if p.target != "" {
		st, err := h.store.Worker(ctx, p.target)
		return err == nil && st.Ready, err
	}
	for _, pl := range p.pools {
		n, err := h.store.Online(ctx, pl)
		if err != nil || n > 0 {
			return n > 0, err
		}
	}
	return false, nil
}

// dispatch runs d on one worker and returns its settlement (§7.3, §13.3–§13.5). A request that finds no
// free worker waits in its tenant's queue in the store (queue.go): first come, first served across every
// replica, woken when capacity is freed, answered 429 at the queue timeout or when the queue is full. One
// that finds no worker online waits the same way, as the Code API's job queue holds a job until a worker
// takes it (a worker restarting or re-registering is back within seconds): 503 worker_unavailable only
// at the queue timeout. A request bound to one worker (pinned, or its stateful session's) never waits
// for it: 503 at once.
func (h *Hub) dispatch(ctx context.Context, d *dispatchReq) (*outcome, error) {
	queueUntil := time.Now().Add(h.cfg.QueueTimeout)
	if d.deadline.Before(queueUntil) {
		queueUntil = d.deadline
	}
	p, err := h.awaitPlan(ctx, d, queueUntil)
	if err != nil {
		return nil, err
	}
	tk := h.newTicket(d.caller.TenantID, p.sig(), queueUntil)
	defer tk.leave(context.WithoutCancel(ctx))
	d.enqueued = func() { tk.leave(context.WithoutCancel(ctx)) }
	for {
		out, err, again := h.dispatchOnce(ctx, d, p, tk)
		if !again {
			return out, err
		}
	}
}

// dispatchOnce makes one attempt: when the request's turn has come (the queue is empty, or it is first
// in it) it takes a free worker; otherwise it joins the queue and sleeps until capacity is freed or its
// turn comes. again means: attempt once more.
func (h *Hub) dispatchOnce(ctx context.Context, d *dispatchReq, p *plan, tk *ticket) (out *outcome, err error, again bool) {
	free, releaseFree := h.waits.watch(store.TopicFree)
	defer releaseFree()
	turn, releaseTurn := h.waits.watch(tk.topic())
	defer releaseTurn()
	first, err := tk.first(ctx)
	if err != nil {
		return nil, err, false
	}
	if first {
		out, err := h.take(ctx, d, p)
		if out != nil || (err != nil && !errors.Is(err, errReassign)) {
			return out, err, false
		}
		if errors.Is(err, errReassign) {
			return nil, nil, true
		}
		if up, err := h.online(ctx, p); err != nil || !up {
			if err != nil || p.target != "" || !time.Now().Before(tk.until) {
				return nil, errors.Join(err, h.noWorker(d)), false
			}
			// None online: wait in the queue for one to come back (woken by its Ready, TopicFree).
		}
	}
	if !tk.joined {
		if full, err := tk.join(ctx, h.cfg.QueueMax); err != nil || full {
			return nil, errors.Join(err, rateLimited(h.cfg.QueueTimeout)), false
		}
	}
	if !time.Now().Before(tk.until) {
		return nil, rateLimited(h.cfg.QueueTimeout), false
	}
	backstop := h.cfg.PollInterval
	if first {
		backstop = min(backstop, time.Second) // the head asks again often: a lost wake-up costs little
	}
	wake := free
	if !first {
		wake = nil // only the head competes for freed capacity; the others wait for their turn
	}
	if !h.sleep2(ctx, wake, turn, min(backstop, time.Until(tk.until))) {
		return nil, errUnavailable("Request abandoned"), false
	}
	return nil, nil, true
}

// awaitPlan is makePlan that, while no worker could take d at all (none registered that fits it, as
// while the only worker re-registers), waits until until for one to register: woken by the
// registration (TopicFree), in a queue of its own per tenant so that such waits are bounded by QueueMax
// too. A request bound to one worker does not wait.
func (h *Hub) awaitPlan(ctx context.Context, d *dispatchReq, until time.Time) (*plan, error) {
	var tk *ticket
	defer func() {
		if tk != nil {
			tk.leave(context.WithoutCancel(ctx))
		}
	}()
	for {
		free, release := h.waits.watch(store.TopicFree)
		p, err := h.makePlan(ctx, d)
		var ce *clientError
		if err == nil || d.target() != "" || !errors.As(err, &ce) || ce.code != codeWorkerUnavailable || !time.Now().Before(until) {
			release()
			return p, err
		}
		if tk == nil {
			tk = h.newTicket(d.caller.TenantID, "no-worker", until)
			if full, err := tk.join(ctx, h.cfg.QueueMax); err != nil || full {
				release()
				return nil, errors.Join(err, rateLimited(h.cfg.QueueTimeout))
			}
		} else if err := tk.renew(ctx); err != nil {
			release()
			return nil, err
		}
		awake := h.sleep2(ctx, free, nil, min(h.cfg.PollInterval, time.Second, time.Until(until)))
		release()
		if !awake {
			return nil, errUnavailable("Request abandoned")
		}
		h.pools.invalidate() // the registration may have made a pool this replica's copy lacks
	}
}

// noWorker is the answer when no worker could take d at all.
func (h *Hub) noWorker(d *dispatchReq) error {
	if d.pinned != "" {
		return errUnavailable("Worker " + quoteClaim(d.pinned) + " is not online at this hub (not paired, not registered, or disconnected)")
	}
	if d.stateful {
		return errUnavailable("The session's worker " + d.affinity + " is not available; a stateful session's files live on it and cannot move to another worker")
	}
	return errUnavailable("No eligible worker is online")
}

// take hands d to a worker with a free slot: its target, or the longest idle worker of an eligible pool.
// (nil, nil): none is free now.
func (h *Hub) take(ctx context.Context, d *dispatchReq, p *plan) (*outcome, error) {
	if p.target != "" {
		out, err := h.tryWorker(ctx, d, p.target, p.caps, false)
		if errors.Is(err, bridge.ErrWorkerBusy) {
			return nil, nil
		}
		return out, err
	}
	for _, pl := range p.pools {
		for range maxTakes {
			w, ok, err := h.store.TakeIdle(ctx, pl)
			if err != nil || !ok {
				if err != nil {
					return nil, err
				}
				break
			}
			out, err := h.tryWorker(ctx, d, w, h.poolCaps(p.catalog, pl), true)
			if errors.Is(err, bridge.ErrWorkerBusy) || errors.Is(err, bridge.ErrWorkerOffline) || errors.Is(err, bridge.ErrWorkerMismatch) {
				continue // a stale idle entry: the worker lapsed or filled up meanwhile
			}
			return out, err
		}
	}
	return nil, nil
}

// maxTakes bounds how many stale idle entries one attempt skips per pool.
const maxTakes = 16

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

// tryWorker enqueues d on worker w (with capabilities caps; fromIdle: taken from its pool's idle set) and
// waits for its settlement.
func (h *Hub) tryWorker(ctx context.Context, d *dispatchReq, w string, caps bridge.Capabilities, fromIdle bool) (*outcome, error) {
	stateful := caps.StatefulWorkspace && d.sessionID != ""
	p := store.EnqueueParams{
		WorkerID: w, AssignmentID: bridge.NewID(), ExpiresAt: d.deadline,
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
	if d.session != nil {
		s := *d.session
		s.Stateful = stateful
		p.Session = &s
	}
	p.FromIdle = fromIdle
	// The settlement is watched from before the enqueue: a worker already waiting can lease, run and
	// settle it before Enqueue has returned here, and a notification nobody watched is gone.
	settled, release := h.waits.watch(store.TopicAssignment(p.AssignmentID))
	defer release()
	a, err := h.store.Enqueue(ctx, p)
	if errors.Is(err, store.ErrUnavailable) {
		return nil, h.unenqueue(ctx, p, err)
	}
	if err != nil {
		return nil, err
	}
	h.metrics.Assignments.WithLabelValues("enqueued").Inc()
	if d.enqueued != nil {
		d.enqueued()
	}
	st, err := h.await(ctx, a, settled)
	h.metrics.Assignments.WithLabelValues(assignmentState(st, err)).Inc()
	if err != nil {
		return nil, err
	}
	o, perr := bridge.ParseObject(st.Canonical)
	if perr != nil {
		return nil, bridge.ErrResultInvalid
	}
	out := &outcome{workerID: w, caps: caps, stateful: stateful, status: st.Status}
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
func (h *Hub) await(ctx context.Context, a *store.Assignment, settled <-chan struct{}) (*store.Settlement, error) {
	w := &awaiting{a: a, clientGone: ctx.Done(), closing: h.closing, fresh: true, settled: settled}
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
	// fresh: just enqueued (nothing to read yet); woken: its topic was notified (its settlement, or a
	// wake-up of everything after the change feed lost messages).
	fresh, woken bool
	// settled is the watch taken before the enqueue: closed when the settlement was stored before the first
	// wait began (then the first wait reads it instead of sleeping).
	settled <-chan struct{}
}

// awaitOnce reads the assignment's state once and sleeps until its settlement is notified, the backstop,
// the client going away or the hub closing; done says the wait is over.
func (h *Hub) awaitOnce(ctx context.Context, w *awaiting) (*store.Settlement, error, bool) {
	a := w.a
	ch, release := h.waits.watch(store.TopicAssignment(a.ID))
	defer release()
	if w.settled != nil {
		select {
		case <-w.settled:
			w.fresh, w.woken = false, true
		default:
		}
		w.settled = nil
	}
	if !time.Now().Before(a.ExpiresAt) {
		st, err := h.complete(ctx, a)
		return st, err, true
	}
	if w.woken {
		// Told of the settlement: collect it in one read (an outage or an early wake-up keeps waiting).
		if st, err := h.store.Collect(ctx, a.WorkerID, a.ID); st != nil {
			return st, err, true
		}
	} else if !w.fresh {
		// The backstop: a settlement whose notification was lost, or a worker that went away.
		var st *store.Settlement
		var ws *store.WorkerState
		// A store outage shorter than the deadline loses nothing: keep asking until the deadline.
		err := h.retryStore(a.ExpiresAt, func() (err error) {
			if st, err = h.store.Settlement(ctx, a.WorkerID, a.ID); err == nil && st == nil {
				ws, err = h.store.Worker(ctx, a.WorkerID)
			}
			return err
		})
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			return nil, err, true
		}
		if st != nil {
			st, err := h.complete(ctx, a)
			return st, err, true
		}
		if ws != nil && (!ws.Online || (ws.Registration != nil && ws.Registration.IncarnationID != a.IncarnationID)) {
			st, err := h.lost(ctx, a)
			return st, err, true
		}
	}
	w.fresh, w.woken = false, false
	t := time.NewTimer(min(h.cfg.PollInterval, time.Until(a.ExpiresAt)))
	defer t.Stop()
	select {
	case <-ch:
		w.woken = true
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
