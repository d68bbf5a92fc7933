package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/workspace"
)

// Reasons an execution is aborted (the context cause), reported as the rejection message.
var (
	errCancelled = &abortReason{msg: "Bridge assignment was cancelled by the hub"}
	errDeadline  = &abortReason{msg: "Bridge assignment deadline passed"}
)

// abortReason is a reason to settle an assignment rejected: its text is the settlement's error, worded as
// the protocol's messages are (a capitalised sentence, §6.3), then the cause's.
type abortReason struct {
	msg   string
	cause error
}

func (e *abortReason) Error() string {
	if e.cause == nil {
		return e.msg
	}
	return e.msg + ": " + e.cause.Error()
}

func (e *abortReason) Unwrap() error { return e.cause }

// job is the per-assignment state shared by the execution and its concurrent tasks (§6.3).
type job struct {
	w        *Worker
	a        *bridge.Assignment
	ctx      context.Context // lives until the settlement is done
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	recovery atomic.Bool // heartbeat retries transient errors (while settling a rejection)

	mu    sync.Mutex
	fail  error                   // first heartbeat or credential failure
	abort context.CancelCauseFunc // aborts the running execution, if any
}

// newJob starts the heartbeat, counted from lastRegister, and the credential upkeep; both run until stop,
// after the settlement.
func (w *Worker) newJob(hard context.Context, a *bridge.Assignment, lastRegister time.Time) *job {
	ctx, cancel := context.WithCancel(hard)
	j := &job{w: w, a: a, ctx: ctx, cancel: cancel}
	j.wg.Add(2)
	go j.heartbeat(lastRegister)
	go j.upkeep(ctx)
	return j
}

func (j *job) stop() {
	j.cancel()
	j.wg.Wait()
}

func (j *job) failed(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail == nil {
		j.fail = err
	}
	if j.abort != nil {
		j.abort(err)
	}
}

func (j *job) fatalErr() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail == nil {
		return nil
	}
	return fatal(j.fail)
}

// heartbeat re-registers every max(25 ms, leaseTtl/2) (§6.3). Outside recovery mode any failure aborts the
// execution; in recovery mode transient failures are retried every retry step.
func (j *job) heartbeat(last time.Time) {
	defer j.wg.Done()
	w := j.w
	for {
		w.mu.Lock()
		interval := max(25*time.Millisecond, w.leaseTTL/2)
		w.mu.Unlock()
		if !sleepCtx(j.ctx, time.Until(last.Add(interval))) {
			return
		}
		last = time.Now()
		err := w.register(j.ctx, true)
		for err != nil && transient(err) && j.recovery.Load() && j.ctx.Err() == nil {
			if !sleepCtx(j.ctx, w.cfg.Timing.RetryStep) {
				return
			}
			err = w.register(j.ctx, true)
		}
		if err != nil {
			if j.ctx.Err() != nil {
				return
			}
			w.logf("heartbeat failed: %v", err)
			j.failed(&abortReason{msg: "Bridge heartbeat failed", cause: err})
			return
		}
	}
}

// upkeep refreshes the credential when it is due, retrying transient errors until the credential expires.
// It runs for the whole job, settlement included: a settlement retried until deadline + grace must not
// outlive the credential it is signed with. A refresh that was sent is seen through to its reply even when
// ctx ends meanwhile (see rotate), and a fatal outcome (401/403, a rotation that could not be persisted)
// is recorded even then: the in-memory credential may be dead.
func (j *job) upkeep(ctx context.Context) {
	defer j.wg.Done()
	w := j.w
	if w.cfg.StaticToken != "" {
		return
	}
	for {
		w.credMu.RLock()
		exp := w.expiresAt
		w.credMu.RUnlock()
		if !sleepCtx(ctx, time.Until(exp.Add(-w.clockOffset()-w.cfg.Timing.RefreshWindow))) {
			return
		}
		for {
			err := w.refreshIfDue(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil && fatal(err) == nil {
				return // the job is over and the credential is not known to be dead
			}
			if !transient(err) || !time.Now().Before(exp) {
				w.logf("credential refresh failed: %v", err)
				j.failed(&abortReason{msg: "Bridge credential refresh failed", cause: err})
				return
			}
			if !sleepCtx(ctx, w.cfg.Timing.RetryStep) {
				return
			}
		}
	}
}

// pollCancellation aborts the execution when the hub says the assignment was cancelled (or 404).
func (j *job) pollCancellation(ctx context.Context, abort context.CancelCauseFunc) {
	w := j.w
	body, _ := bridge.Marshal(bridge.CancellationRequest{ProtocolVersion: 1, IncarnationID: w.incarnation})
	path := bridge.PathCancellation(w.cfg.WorkerID, j.a.AssignmentID)
	for sleepCtx(ctx, w.cfg.Timing.CancelPoll) {
		var cr bridge.CancellationResponse
		err := w.do(ctx, path, body, w.cfg.Timing.CancelTimeout, &cr)
		if (err == nil && cr.Cancelled) || statusOf(err) == http.StatusNotFound {
			abort(errCancelled)
			return
		}
	}
}

// outcome is what an execution produced.
type outcome struct {
	result    *bridge.Object
	errMsg    string
	errCode   string
	ambiguous bool // state may have changed and the outcome cannot be reported: quarantine
}

// execute runs an acknowledged assignment and settles it (§6.3–§6.6).
func (w *Worker) execute(hard context.Context, a *bridge.Assignment, remaining time.Duration) error {
	now := time.Now()
	localDeadline := now.Add(remaining)
	if exp, err := bridge.ParseTime(a.ExpiresAt); err == nil {
		w.setOffset(exp.Sub(localDeadline))
	}
	j := w.newJob(hard, a, now)
	defer j.stop()

	if err := w.refreshBefore(j, hard, a, localDeadline); err != nil {
		return err
	}
	if !time.Now().Before(localDeadline) {
		return w.rejectUnexecutedIn(j, hard, a, msgAckExpired)
	}
	r := w.runJob(j, a, localDeadline)
	if r.out.ambiguous {
		return w.ambiguous(j, hard, a, r, localDeadline)
	}
	s, until := w.settlementOf(j, a, r, localDeadline)
	return w.settled(j, a, r, s, w.settle(hard, a, s, until))
}

// refreshBefore refreshes the bridge credential when it is due, bounded by the deadline; a failed refresh
// rejects the assignment unexecuted and is returned.
func (w *Worker) refreshBefore(j *job, hard context.Context, a *bridge.Assignment, localDeadline time.Time) error {
	if !w.refreshDue() {
		return nil
	}
	rctx, cancel := context.WithDeadline(j.ctx, localDeadline)
	err := w.refreshIfDue(rctx)
	cancel()
	if err == nil {
		return nil
	}
	j.recovery.Store(true)
	serr := w.settle(hard, a, rejection(a, w.incarnation, "Bridge credential refresh failed before execution", ""), time.Now().Add(w.cfg.Timing.RejectionGrace))
	if f := fatal(err); f != nil {
		return f
	}
	return errors.Join(err, serr)
}

// jobRun is what running an assignment produced.
type jobRun struct {
	out       outcome
	mutation  bool   // a workspace mutation armed the marker
	sessionID string // the runtime session of a sandbox assignment
	aborted   error  // why the execution context ended early (nil: it did not)
}

// runJob runs a (sandbox or workspace) until it ends, its deadline passes, or the job fails or is
// cancelled by the hub (polled meanwhile).
func (w *Worker) runJob(j *job, a *bridge.Assignment, localDeadline time.Time) jobRun {
	ectx, abort := context.WithCancelCause(j.ctx)
	ectx, cancelDeadline := context.WithDeadlineCause(ectx, localDeadline, errDeadline)
	j.mu.Lock()
	j.abort = abort
	fail := j.fail
	j.mu.Unlock()
	if fail != nil {
		abort(fail)
	}
	tasks, stopTasks := context.WithCancel(ectx)
	var tw sync.WaitGroup
	tw.Add(1)
	go func() { defer tw.Done(); j.pollCancellation(tasks, abort) }()

	var r jobRun
	if a.Kind() == bridge.KindWorkspaceTool {
		r.out, r.mutation = w.runWorkspace(ectx, a)
	} else {
		r.sessionID = a.RuntimeSessionID
		r.out = w.runSandbox(ectx, a)
	}
	r.aborted = context.Cause(ectx)
	stopTasks()
	tw.Wait()
	j.mu.Lock()
	j.abort = nil
	j.mu.Unlock()
	cancelDeadline()
	abort(nil)
	return r
}

// settlementOf is the settlement of a run and how long it may be retried: a fulfilment until the
// deadline, or a rejection until the deadline plus the grace the hub keeps the record.
func (w *Worker) settlementOf(j *job, a *bridge.Assignment, r jobRun, localDeadline time.Time) (bridge.Settlement, time.Time) {
	if r.out.result != nil && r.aborted == nil {
		return fulfillment(a, w.incarnation, r.out.result), localDeadline
	}
	msg, code := r.out.errMsg, r.out.errCode
	if r.out.result != nil || msg == "" {
		msg = "Bridge assignment was aborted"
		if r.aborted != nil {
			msg = r.aborted.Error()
		}
		if a.Kind() == bridge.KindWorkspaceTool {
			code = "EXECUTION_ABORTED"
		}
	}
	j.recovery.Store(true)
	return rejection(a, w.incarnation, msg, code), localDeadline.Add(w.cfg.Timing.RejectionGrace)
}

// settled finishes after the settlement attempt (err): a settled mutation clears the marker; an
// unsettled mutation or stateful fulfilment quarantines.
func (w *Worker) settled(j *job, a *bridge.Assignment, r jobRun, s bridge.Settlement, err error) error {
	if err == nil {
		if r.mutation {
			if cerr := ClearOwnedMarker(w.cfg.MarkerPath, w.incarnation); cerr != nil {
				return cerr
			}
			w.markerArmed.Store(false)
		}
		return j.fatalErr()
	}
	w.logf("settlement of %s failed: %v", a.AssignmentID, err)
	if r.mutation {
		return fmt.Errorf("%w: workspace mutation %s could not be settled (%v); marker kept", ErrQuarantined, a.AssignmentID, err)
	}
	if r.sessionID != "" && s.Status == bridge.StatusFulfilled {
		_ = w.quarantineSession(r.sessionID) // logged; the worker stops either way
		return fmt.Errorf("%w: stateful assignment %s could not be settled (%v)", ErrQuarantined, a.AssignmentID, err)
	}
	if f := fatal(err); f != nil {
		return f
	}
	if f := j.fatalErr(); f != nil {
		return f
	}
	return fmt.Errorf("settling %s: %w", a.AssignmentID, err)
}

func (w *Worker) rejectUnexecutedIn(j *job, hard context.Context, a *bridge.Assignment, msg string) error {
	j.recovery.Store(true)
	err := w.settle(hard, a, rejection(a, w.incarnation, msg, ""), time.Now().Add(w.cfg.Timing.RejectionGrace))
	if err != nil {
		if f := fatal(err); f != nil {
			return f
		}
		return err
	}
	return j.fatalErr()
}

// ambiguous ends a run whose outcome cannot be reported (§6.4): no settlement is sent. A stateful sandbox
// run concerns its runtime session alone: once the supervisor has discarded the session, nothing of unknown
// state is left on this worker, and the hub keeps the session fenced (WORKSPACE_QUARANTINED until
// reset-workspace), so the worker serves on. Exiting 5 there (as §6.4 asks) let one client take a
// stateful worker offline for every tenant by giving up mid-exec (issue 35 item 2). A mutation, or a session
// that could not be discarded, still quarantines the worker.
//
// Serving on waits for the assignment's deadline first, heartbeating: until then the hub redelivers an
// acknowledged, unsettled assignment to every lease of this incarnation (§7.3 lease step 1), and running it
// again would run the client's code twice. The hub holds the worker's lock that long anyway.
func (w *Worker) ambiguous(j *job, hard context.Context, a *bridge.Assignment, r jobRun, localDeadline time.Time) error {
	if r.sessionID != "" {
		err := w.quarantineSession(r.sessionID)
		if err == nil {
			w.logf("assignment %s: %s; not settling: runtime session %q stays fenced on the hub until reset-workspace; serving on after its deadline",
				a.AssignmentID, r.out.errMsg, r.sessionID)
			w.abandon(a.AssignmentID, localDeadline)
			sleepCtx(hard, time.Until(localDeadline))
			return j.fatalErr()
		}
		return fmt.Errorf("%w: assignment %s: %s; not settling, and runtime session %q could not be discarded: %v",
			ErrQuarantined, a.AssignmentID, r.out.errMsg, r.sessionID, err)
	}
	return fmt.Errorf("%w: assignment %s: %s; not settling", ErrQuarantined, a.AssignmentID, r.out.errMsg)
}

// abandon records an assignment left unsettled on purpose until well past its deadline (see abandoned).
func (w *Worker) abandon(id string, localDeadline time.Time) {
	w.abandonedMu.Lock()
	defer w.abandonedMu.Unlock()
	if w.abandoned == nil {
		w.abandoned = map[string]time.Time{}
	}
	for k, d := range w.abandoned {
		if time.Since(d) > w.cfg.Timing.RejectionGrace {
			delete(w.abandoned, k)
		}
	}
	w.abandoned[id] = localDeadline
}

// isAbandoned says whether this incarnation left the assignment unsettled on purpose (see abandon).
func (w *Worker) isAbandoned(id string) bool {
	w.abandonedMu.Lock()
	defer w.abandonedMu.Unlock()
	_, ok := w.abandoned[id]
	return ok
}

// quarantineSession discards a runtime session whose state is unknown (§10.4 step 4).
func (w *Worker) quarantineSession(sid string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.cfg.Supervisor.Quarantine(ctx, sid); err != nil {
		w.logf("discarding runtime session %q failed: %v", sid, err)
		return err
	}
	w.logf("runtime session %q quarantined locally", sid)
	return nil
}

// runSandbox forwards request.body to the supervisor (§11.1) and classifies the outcome (§6.4).
func (w *Worker) runSandbox(ctx context.Context, a *bridge.Assignment) outcome {
	req := a.Request.Object()
	var body *bridge.Object
	var headers [][2]string
	ok := req != nil
	if ok {
		v, has := req.Get("body")
		body, ok = v.(*bridge.Object)
		ok = ok && has
	}
	if ok {
		if hv, has := req.Get("headers"); has && hv != nil {
			ho, isObj := hv.(*bridge.Object)
			if !isObj {
				ok = false
			} else {
				for _, m := range ho.Members {
					s, isStr := m.Value.(string)
					if !isStr {
						ok = false
						break
					}
					headers = append(headers, [2]string{m.Key, s})
				}
			}
		}
	}
	if !ok {
		return outcome{errMsg: "Invalid sandbox assignment request"}
	}
	stateful := a.RuntimeSessionID != ""
	if stateful && !w.cfg.Supervisor.Stateful() {
		return outcome{errMsg: "Runtime supervisor does not keep stateful workspaces"}
	}
	raw, err := bridge.Canonical(body)
	if err != nil {
		return outcome{errMsg: "Invalid sandbox assignment body"}
	}
	call := RunnerCall{SessionID: a.RuntimeSessionID, AssignmentID: a.AssignmentID, Body: raw, Tree: body}
	call.Owner, call.Headers = takeOwner(headers)
	res, err := w.cfg.Supervisor.Execute(ctx, call)
	aborted := ctx.Err() != nil
	if err == nil {
		if stateful && aborted {
			return outcome{ambiguous: true, errMsg: "stateful execution was aborted after reaching the runner"}
		}
		return outcome{result: res}
	}
	var re *RunError
	if !errors.As(err, &re) {
		re = &RunError{Message: err.Error()}
	}
	if stateful && !re.KnownClean {
		return outcome{ambiguous: true, errMsg: re.Message}
	}
	return outcome{errMsg: re.Message}
}

// takeOwner removes the hub's bridge.HeaderSessionOwner from headers and returns its value: it is for this
// worker's runner, never for a runner behind an endpoint or a container.
func takeOwner(headers [][2]string) (string, [][2]string) {
	owner := ""
	kept := headers[:0:0]
	for _, kv := range headers {
		if strings.EqualFold(kv[0], bridge.HeaderSessionOwner) {
			owner = kv[1]
			continue
		}
		kept = append(kept, kv)
	}
	return owner, kept
}

// runWorkspace checks a workspace request against the active registration, arms the marker for
// mutations, and runs it (§6.3 step 4, §9, §10.1).
func (w *Worker) runWorkspace(ctx context.Context, a *bridge.Assignment) (outcome, bool) {
	invalid := func(msg string) outcome { return outcome{errMsg: msg, errCode: "INVALID_REQUEST"} }
	req := a.Request.Object()
	if req == nil {
		return invalid("Workspace request must be an object"), false
	}
	opV, _ := req.Get("operation")
	wsV, _ := req.Get("workspaceId")
	op, _ := opV.(string)
	wsID, _ := wsV.(string)
	caps := w.ActiveCapabilities()
	if w.cfg.Workspace == nil || wsID != w.cfg.WorkspaceID || !caps.Allows(wsID, op) {
		return invalid("Workspace operation or workspace is not advertised by the active registration"), false
	}
	if msg := unnegotiated(req, op, caps.WorkspaceTools); msg != "" {
		return invalid(msg), false
	}
	raw, err := bridge.Canonical(req)
	if err != nil {
		return invalid("Workspace request is not encodable"), false
	}
	mutation := isMutation(op)
	if mutation {
		err := ArmMarker(w.cfg.MarkerPath, Marker{WorkerID: w.cfg.WorkerID, WorkspaceID: wsID, OwnerID: w.incarnation,
			Reason: "Workspace mutation " + op + " is pending settlement"})
		if err != nil {
			return outcome{ambiguous: true, errMsg: "arming the quarantine marker failed: " + err.Error()}, false
		}
		w.markerArmed.Store(true)
	}
	res, err := w.cfg.Workspace.Do(ctx, op, raw)
	if err != nil {
		var we *workspace.Error
		if !errors.As(err, &we) || (mutation && we.MayHaveCommitted) {
			// The executor cannot prove nothing changed: keep the marker, no settlement (§6.4).
			return outcome{ambiguous: true, errMsg: err.Error()}, mutation
		}
		return outcome{errMsg: we.Message, errCode: string(we.Code)}, mutation
	}
	fields, err := bridge.ParseObject(res)
	if err != nil {
		if mutation {
			return outcome{ambiguous: true, errMsg: "workspace result is not a JSON object"}, mutation
		}
		return outcome{errMsg: "Workspace result is not a JSON object", errCode: "INVALID_REQUEST"}, false
	}
	out := &bridge.Object{}
	out.Set("protocolVersion", float64(1))
	out.Set("operation", op)
	out.Set("workspaceId", wsID)
	for _, m := range fields.Members {
		if m.Key == "protocolVersion" || m.Key == "operation" || m.Key == "workspaceId" {
			continue
		}
		out.Set(m.Key, m.Value)
	}
	return outcome{result: out}, mutation
}

// unnegotiated names the mode or feature of a workspace request the registration did not negotiate
// ("" when everything it uses was).
func unnegotiated(req *bridge.Object, op string, wt *bridge.WorkspaceTools) string {
	has := func(k string) bool { _, ok := req.Get(k); return ok }
	switch op {
	case workspace.OpWriteFile:
		mode := "replace"
		if v, ok := req.Get("overwrite"); ok && v == false {
			mode = "create"
		}
		if !slices.Contains(wt.WriteFileModes, mode) {
			return "write_file mode " + mode + " was not negotiated"
		}
	case workspace.OpEditFile, workspace.OpPreviewEdit:
		mode := "single"
		if has("edits") {
			mode = "batch"
		}
		if !slices.Contains(wt.EditFileModes, mode) {
			return "edit mode " + mode + " was not negotiated"
		}
		if has("expectedBaseSha256") && !slices.Contains(wt.EditFileFeatures, "expected_base_sha256") {
			return "expectedBaseSha256 was not negotiated"
		}
	case workspace.OpListFiles:
		if has("afterPath") && !slices.Contains(wt.ListFileFeatures, "after_path") {
			return "afterPath was not negotiated"
		}
	}
	return ""
}
