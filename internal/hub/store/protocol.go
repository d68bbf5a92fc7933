package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// Protocol is the hub's state machine of spec §7 (pairing, registration with
// fencing, lease, acknowledge, cancel, settle, complete, withdraw, workspace
// reset, quarantine), written once over a Backend. Every Store method is one
// Backend transaction on the records of one worker, so the embedded and the
// Redis store follow the same rules by construction.
type Protocol struct {
	b        Backend
	leaseTTL time.Duration
	nonceTTL time.Duration
	grace    time.Duration
	block    int64

	// quarantined holds incarnations quarantined when even the quarantine
	// mark could not be stored (§10.3: fail closed in this process at least).
	mu          sync.Mutex
	quarantined map[string]map[string]bool

	onError atomic.Pointer[func(op string, err error)]
}

// Options are the lifetimes of §7.1; zero takes the default.
type Options struct {
	LeaseTTL time.Duration
	NonceTTL time.Duration
	Grace    time.Duration
	// GenerationBlock is how many assignment generations one write of the
	// worker record reserves (default 1: every dispatch persists its own),
	// so that a backend where that write is an fsync need not pay it per
	// dispatch. Generations stay monotonic across restarts either way.
	GenerationBlock int64
}

var _ Store = (*Protocol)(nil)

// NewProtocol returns the hub's rules over b. The Protocol owns b: Close
// closes it.
func NewProtocol(b Backend, o Options) *Protocol {
	p := &Protocol{b: b, leaseTTL: o.LeaseTTL, nonceTTL: o.NonceTTL, grace: o.Grace, block: o.GenerationBlock,
		quarantined: map[string]map[string]bool{}}
	if p.leaseTTL <= 0 {
		p.leaseTTL = DefaultLeaseTTL
	}
	if p.nonceTTL <= 0 {
		p.nonceTTL = DefaultNonceTTL
	}
	if p.grace <= 0 {
		p.grace = DefaultGrace
	}
	if p.block <= 0 {
		p.block = 1
	}
	return p
}

// Backend returns the storage below (for other state that shares it).
func (p *Protocol) Backend() Backend { return p.b }

// Epoch passes Backend.Epoch through (state-loss detection).
func (p *Protocol) Epoch(ctx context.Context, create bool) (string, error) {
	v, err := p.b.Epoch(ctx, create)
	return v, p.observe("epoch", readErr(err))
}

// Close closes the backend.
func (p *Protocol) Close() error { return p.b.Close() }

// Keys. Per-worker keys share the hash tag {w:<id>} (§7.4).
func wkey(w, part string) string { return "{w:" + w + "}:" + part }
func recKey(w string) string     { return wkey(w, "rec") }
func regKey(w string) string     { return wkey(w, "reg") }
func readyKey(w string) string   { return wkey(w, "ready") }
func lockKey(w string) string    { return wkey(w, "lock") }
func queueKey(w string) string   { return wkey(w, "q") }
func asgKey(w, id string) string { return wkey(w, "a:"+id) }
func ownerKey(id string) string  { return "asg:" + id }
func codeKey(h string) string    { return "code:" + h }

// dispatchedSet lists the assignments a hub replica of an older release waits for, as "<workerID>
// <assignmentID>"; the current one records the dispatcher in the worker lock (slotRec.Dispatcher).
func dispatchedSet(replica string) string { return "rep:" + replica + ":asg" }

// WorkersSet is the set of workers that registered (candidates for Workers).
const WorkersSet = "workers"

func sessionKey(sid string) string { return bridge.HashSecret(sid) }

func readyMark(inc string, gen int64) string { return inc + ":" + strconv.FormatInt(gen, 10) }

// queueRec holds one worker's per-incarnation queues and claims, and the
// last assignment generation issued (up to the persisted ceiling in the
// worker record). Entries whose assignment record expired are pruned when met.
type queueRec struct {
	Queues map[string][]string `json:"queues,omitempty"`
	Claims map[string]string   `json:"claims,omitempty"`
	Issued int64               `json:"issued,omitempty"`
}

// asgRec is one assignment record. The lease token rides along so that
// whichever replica serves the lease can deliver it; it is dropped with the
// record at deadline + grace.
type asgRec struct {
	A          Assignment `json:"a"`
	LeaseToken string     `json:"leaseToken,omitempty"`
	Acked      bool       `json:"acked,omitempty"`
	Cancelled  bool       `json:"cancelled,omitempty"`
	Finished   bool       `json:"finished,omitempty"`
	// Completed: the dispatcher collected the settlement (Complete answers
	// the same again, so a retried Complete does not lose it).
	Completed bool `json:"completed,omitempty"`
	// Committed: a fulfilled stateful settlement cleared the workspace fence when it was stored.
	Committed bool `json:"committed,omitempty"`
	// Unlisted: the dispatcher is recorded with the assignment's slot in the worker lock, where the
	// sweeper finds it, rather than on the dispatcher's list (which older hubs keep and sweep).
	Unlisted   bool        `json:"unlisted,omitempty"`
	Settlement *Settlement `json:"settlement,omitempty"`
	GCAt       time.Time   `json:"gcAt"`
}

func decode[T any](raw []byte, what string) (*T, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, what, err)
	}
	return &v, nil
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every record type is plain data; this cannot happen.
		panic("store: encode: " + err.Error())
	}
	return b
}

// wtx is one worker transaction: its records read once, and what changed.
type wtx struct {
	p   *Protocol
	tx  Txn
	w   string
	now time.Time

	rec   *WorkerRecord
	reg   *Registration
	ready string
	slots *slotsRec
	q     *queueRec
	asgs  map[string]*asgRec
	// prevPool is the pool of the registration as read (its sets are left if the worker moves).
	prevPool string
	// pre holds records read with the worker's (update's extra keys), by key.
	pre map[string][]byte
	// notIdle: the worker is known to be out of its idle set (the dispatcher took it from there).
	notIdle bool

	recDirty, regDirty, readyDirty, slotsDirty, qDirty bool
	asgDirty                                           map[string]bool
}

// worker reads one worker's records into a wtx, with the extra keys in the same read (one round trip).
func (p *Protocol) worker(tx Txn, w string, extra ...string) (*wtx, error) {
	vals, err := tx.Get(append([]string{recKey(w), regKey(w), readyKey(w), lockKey(w), queueKey(w)}, extra...)...)
	if err != nil {
		return nil, err
	}
	t := &wtx{p: p, tx: tx, w: w, now: tx.Now(), asgs: map[string]*asgRec{}, asgDirty: map[string]bool{}, pre: map[string][]byte{}}
	for i, k := range extra {
		t.pre[k] = vals[5+i]
	}
	if t.rec, err = decode[WorkerRecord](vals[0], "worker record"); err != nil {
		return nil, err
	}
	if t.rec == nil {
		t.rec = &WorkerRecord{WorkerID: w}
	}
	if t.reg, err = decode[Registration](vals[1], "registration"); err != nil {
		return nil, err
	}
	if t.reg != nil {
		t.prevPool = t.reg.Pool
	}
	t.ready = string(vals[2])
	slots, err := decode[slotsRec](vals[3], "slots")
	if err != nil {
		return nil, err
	}
	t.slots = loadSlots(slots, t.now)
	if t.q, err = decode[queueRec](vals[4], "queues"); err != nil {
		return nil, err
	}
	if t.q == nil {
		t.q = &queueRec{}
	}
	if t.q.Queues == nil {
		t.q.Queues = map[string][]string{}
	}
	if t.q.Claims == nil {
		t.q.Claims = map[string]string{}
	}
	return t, nil
}

// update runs fn as one transaction on worker w (operation op). Writes fn
// made are stored even when it returns a protocol error; a read or decode
// failure aborts.
func (p *Protocol) update(ctx context.Context, op, w string, fn func(t *wtx) error, extra ...string) error {
	err := p.b.Update(ctx, func(tx Txn) error {
		t, err := p.worker(tx, w, extra...)
		if err != nil {
			return Abort(err)
		}
		ferr := fn(t)
		if _, abort := IsAbort(ferr); abort {
			return ferr
		}
		t.flush()
		return ferr
	})
	err, _ = IsAbort(err)
	return p.observe(op, err)
}

// updateAsg is update with assignment id's record read together with the worker's.
func (p *Protocol) updateAsg(ctx context.Context, op, w, id string, fn func(t *wtx) error) error {
	return p.update(ctx, op, w, fn, asgKey(w, id))
}

// ObserveErrors registers fn to be told of every store operation: err is
// the storage failure, or nil when the store answered (a protocol refusal
// included). The hub counts failures by operation and notices recovery.
func (p *Protocol) ObserveErrors(fn func(op string, err error)) { p.onError.Store(&fn) }

// observe passes operation op's outcome to the observer.
func (p *Protocol) observe(op string, err error) error {
	if fn := p.onError.Load(); fn != nil {
		var other *otherOwner
		if err == nil || isProtocolErr(err) || errors.As(err, &other) {
			(*fn)(op, nil)
		} else {
			(*fn)(op, err)
		}
	}
	return err
}

func (p *Protocol) read(ctx context.Context, op string, keys ...string) ([][]byte, error) {
	v, err := p.b.Read(ctx, keys...)
	return v, p.observe(op, readErr(err))
}

func (p *Protocol) members(ctx context.Context, op, set string) ([]string, error) {
	v, err := p.b.Members(ctx, set)
	return v, p.observe(op, readErr(err))
}

func (p *Protocol) insertNew(ctx context.Context, op, key string, ttl time.Duration, notBefore time.Time) (bool, error) {
	v, err := p.b.InsertNew(ctx, key, ttl, notBefore)
	return v, p.observe(op, readErr(err))
}

// asg reads (and watches) one assignment record; nil when it is gone.
func (t *wtx) asg(id string) (*asgRec, error) {
	if a, ok := t.asgs[id]; ok {
		return a, nil
	}
	raw, ok := t.pre[asgKey(t.w, id)]
	if !ok {
		vals, err := t.tx.Get(asgKey(t.w, id))
		if err != nil {
			return nil, Abort(err)
		}
		raw = vals[0]
	}
	a, err := decode[asgRec](raw, "assignment")
	if err != nil {
		return nil, Abort(err)
	}
	if a != nil {
		a.A.LeaseToken = a.LeaseToken
	}
	t.asgs[id] = a
	return a, nil
}

func (t *wtx) putAsg(a *asgRec) {
	t.asgs[a.A.ID] = a
	t.asgDirty[a.A.ID] = true
}

// undispatch forgets the assignment's dispatcher: nobody waits for it any more, so a sweep of that
// dispatcher has nothing to end. It is taken off the dispatcher's list (kept by older hubs) or, when it still
// holds a slot, the slot stops naming the dispatcher.
func (t *wtx) undispatch(a *asgRec) {
	if a.A.Dispatcher != "" && !a.Unlisted {
		t.tx.SetRemove(dispatchedSet(a.A.Dispatcher), a.A.WorkerID+" "+a.A.ID)
	}
	if r, held := t.slots.Active[a.A.ID]; held && r.Dispatcher != "" {
		r.Dispatcher = ""
		t.slots.Active[a.A.ID] = r
		t.slotsDirty = true
	}
}

// dropAsg deletes an assignment and every reference to it.
func (t *wtx) dropAsg(id string) {
	if a := t.asgs[id]; a != nil {
		t.undispatch(a)
		t.unqueue(a.A.IncarnationID, id)
		t.dropClaims(id)
	}
	t.asgs[id] = nil
	t.asgDirty[id] = true
	t.tx.Delete(ownerKey(id))
}

// unqueue removes id from the incarnation's queue.
func (t *wtx) unqueue(inc, id string) {
	q := t.q.Queues[inc]
	if !slices.Contains(q, id) {
		return
	}
	t.q.Queues[inc] = slices.DeleteFunc(q, func(x string) bool { return x == id })
	if len(t.q.Queues[inc]) == 0 {
		delete(t.q.Queues, inc)
	}
	t.qDirty = true
}

// putUntil writes v expiring at until, or deletes the key when that moment
// has passed.
func (t *wtx) putUntil(key string, v []byte, until time.Time) {
	if !t.now.Before(until) {
		t.tx.Delete(key)
		return
	}
	t.tx.Put(key, v, Volatile, until)
}

// flush queues the changed records as the transaction's writes.
func (t *wtx) flush() {
	if t.recDirty {
		t.tx.Put(recKey(t.w), encode(t.rec), Durable, time.Time{})
	}
	if t.regDirty {
		if t.reg == nil {
			t.tx.Delete(regKey(t.w))
		} else {
			t.putUntil(regKey(t.w), encode(t.reg), t.reg.ExpiresAt)
		}
	}
	if t.readyDirty {
		if t.ready == "" {
			t.tx.Delete(readyKey(t.w))
		} else {
			t.tx.Put(readyKey(t.w), []byte(t.ready), Volatile, t.now.Add(ReadyTTL(t.p.leaseTTL)))
		}
	}
	if t.slotsDirty {
		t.putSlots()
	}
	if t.regDirty || t.readyDirty || t.slotsDirty {
		t.syncPools()
	}
	if t.qDirty {
		if len(t.q.Queues) == 0 && len(t.q.Claims) == 0 && t.q.Issued == 0 {
			t.tx.Delete(queueKey(t.w))
		} else {
			t.tx.Put(queueKey(t.w), encode(t.q), Volatile, time.Time{})
		}
	}
	for id := range t.asgDirty {
		a := t.asgs[id]
		if a == nil {
			t.tx.Delete(asgKey(t.w, id))
			continue
		}
		a.LeaseToken = a.A.LeaseToken
		t.putUntil(asgKey(t.w, id), encode(a), a.GCAt)
	}
}

func (t *wtx) isReady() bool { return isReady(t.reg, t.ready) }

func isReady(reg *Registration, ready string) bool {
	if reg == nil {
		return false
	}
	if !reg.Capabilities.RequiresReadyConfirmation {
		return true
	}
	return ready == readyMark(reg.IncarnationID, reg.Generation)
}

// clearFenceIfNamed drops a stateful assignment's workspace fence when it
// still names that assignment, reporting whether it did.
func (t *wtx) clearFenceIfNamed(a *Assignment) bool {
	if a.RuntimeSessionID == "" {
		return false
	}
	k := sessionKey(a.RuntimeSessionID)
	if t.rec.WorkspaceFences[k] != a.ID {
		return false
	}
	delete(t.rec.WorkspaceFences, k)
	t.recDirty = true
	return true
}

// fenced reports the incarnation's own marks (§7.2 step 2).
func (t *wtx) marks(inc string) error {
	if _, q := t.rec.Quarantined[inc]; q || t.p.locallyQuarantined(t.w, inc) {
		return bridge.ErrWorkerQuarantined
	}
	if _, f := t.rec.Fenced[inc]; f {
		return bridge.ErrWorkerFenced
	}
	return nil
}

func (p *Protocol) locallyQuarantined(w, inc string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.quarantined[w][inc]
}

// quarantine marks an incarnation quarantined and drops its registration
// (§10.3). When the mark cannot be stored it is kept in this process.
func (p *Protocol) quarantine(ctx context.Context, w, inc string) {
	p.mu.Lock()
	if p.quarantined[w] == nil {
		p.quarantined[w] = map[string]bool{}
	}
	p.quarantined[w][inc] = true
	p.mu.Unlock()
	err := p.update(ctx, "quarantine", w, func(t *wtx) error {
		if t.rec.Quarantined == nil {
			t.rec.Quarantined = map[string]time.Time{}
		}
		t.rec.Quarantined[inc] = t.now
		t.recDirty = true
		if t.reg != nil && t.reg.IncarnationID == inc {
			t.reg, t.regDirty = nil, true
			t.tx.Notify(TopicWorker(w))
		}
		return nil
	})
	if err == nil {
		p.mu.Lock()
		delete(p.quarantined[w], inc)
		p.mu.Unlock()
	}
}

// readErr normalises an error from Backend.Read or Members.
func readErr(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrCorrupt) {
		return err
	}
	return Unavailable(err)
}
