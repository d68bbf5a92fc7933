package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// BackendFactory opens a fresh, empty store and returns its backend; the
// suite closes it.
type BackendFactory func(t *testing.T) store.Backend

// RunFaults drives one assignment through the protocol the way the hub and
// a worker do (each retrying a store failure, the worker resending the same
// settlement bytes) while a FaultBackend fails one primitive call — every
// call in turn, in every Mode — and checks that the assignment is neither
// lost nor settled twice: the dispatcher collects exactly the settlement the
// worker stored, a conflicting settlement is fenced, the worker ran one
// assignment, and nothing is left locked.
func RunFaults(t *testing.T, newBackend BackendFactory) {
	for _, stateful := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateful=%v", stateful), func(t *testing.T) {
			calls := faultRun(t, newBackend, stateful, 0, FailBefore)
			if calls < 5 {
				t.Fatalf("a clean run made only %d store calls", calls)
			}
			for _, m := range []Mode{FailBefore, FailAfter, Timeout, TimeoutAfter} {
				for k := 1; k <= calls; k++ {
					t.Run(fmt.Sprintf("%v@%d", m, k), func(t *testing.T) { faultRun(t, newBackend, stateful, k, m) })
				}
			}
		})
	}
}

// callTimeout bounds every store call of the drive, as the hub's request
// contexts do.
const callTimeout = 50 * time.Millisecond

// retry calls f until it returns something other than a store failure.
func retry(t *testing.T, what string, f func(ctx context.Context) error) error {
	t.Helper()
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		err := f(ctx)
		cancel()
		if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
	t.Fatalf("%s: store failure never cleared", what)
	return nil
}

// faultRun runs the drive with the at-th call failing in mode m and returns
// how many store calls the drive made.
func faultRun(t *testing.T, newBackend BackendFactory, stateful bool, at int, m Mode) int {
	fb := NewFaultBackend(newBackend(t))
	s := store.NewProtocol(fb, store.Options{LeaseTTL: time.Minute, Grace: time.Second})
	t.Cleanup(func() { _ = s.Close() })
	auth := pair(t, s, worker)
	_, err := register(t, s, incA, auth, caps(stateful, false))
	want(t, err, nil)
	sid := ""
	if stateful {
		sid = "sess-" + bridge.NewID()
	}
	fb.Arm(at, m)
	a := dispatch(t, s, sid)
	leased := work(t, s, auth, a)
	body := `{"protocolVersion":1,"status":"fulfilled","result":{"id":"` + a.ID + `"}}`
	var fin *store.Settlement
	err = retry(t, "complete", func(ctx context.Context) error {
		var err error
		fin, err = s.Complete(ctx, worker, a.ID)
		return err
	})
	if err != nil || fin == nil || string(fin.Canonical) != body {
		t.Fatalf("the dispatcher lost the settlement: %v %v", fin, err)
	}
	calls := fb.Calls()
	fb.Arm(0, FailBefore)
	if leased != 1 {
		t.Fatalf("the worker ran %d assignments", leased)
	}
	// Settled once: the stored bytes stand, other bytes are fenced.
	want(t, settle(s, a, auth, bridge.StatusFulfilled, body), nil)
	want(t, settle(s, a, auth, bridge.StatusFulfilled, `{"other":1}`), bridge.ErrAssignmentFenced)
	checkFreed(t, s, auth, sid)
	return calls
}

// dispatch enqueues like the hub: once per attempt; a store failure makes it
// withdraw the attempt (it may or may not exist) and dispatch anew.
func dispatch(t *testing.T, s store.Store, sid string) *store.Assignment {
	for range 3 {
		var a *store.Assignment
		id := bridge.NewID()
		err := retry(t, "enqueue", func(ctx context.Context) error {
			var err error
			a, err = s.Enqueue(ctx, store.EnqueueParams{WorkerID: worker, AssignmentID: id, LeaseTokenHash: bridge.HashSecret(token),
				ExpiresAt: time.Now().Add(time.Minute), RuntimeSessionID: sid, ExecutionKind: bridge.KindSandbox, Request: []byte(`{}`)})
			if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				werr := retry(t, "withdraw", func(ctx context.Context) error { return s.Withdraw(ctx, worker, id) })
				if werr != nil && !errors.Is(werr, bridge.ErrAssignmentNotFound) {
					t.Fatalf("withdraw after a failed enqueue: %v", werr)
				}
				return errRedispatch
			}
			return err
		})
		if errors.Is(err, errRedispatch) {
			continue
		}
		want(t, err, nil)
		return a
	}
	t.Fatal("no dispatch succeeded")
	return nil
}

var errRedispatch = errors.New("redispatch")

// work is the worker: lease, ack, settle (resending the same bytes), and
// reports how many distinct assignments it leased.
func work(t *testing.T, s store.Store, auth store.Auth, want *store.Assignment) int {
	seen := map[string]bool{}
	var a *store.Assignment
	for range 10 {
		err := retry(t, "lease", func(ctx context.Context) error {
			var err error
			a, err = s.Lease(ctx, worker, incA, auth.IdentityID)
			return err
		})
		if err != nil {
			t.Fatalf("lease: %v", err)
		}
		if a != nil {
			break
		}
	}
	if a == nil || a.ID != want.ID {
		t.Fatalf("leased %+v, want %s", a, want.ID)
	}
	seen[a.ID] = true
	if err := retry(t, "ack", func(ctx context.Context) error { return ack(s, a) }); err != nil {
		t.Fatalf("ack: %v", err)
	}
	body := `{"protocolVersion":1,"status":"fulfilled","result":{"id":"` + a.ID + `"}}`
	if err := retry(t, "settle", func(ctx context.Context) error {
		return s.Settle(ctx, store.SettleParams{WorkerID: a.WorkerID, AssignmentID: a.ID, IncarnationID: a.IncarnationID,
			Generation: a.Generation, LeaseTokenHash: bridge.HashSecret(token), IdentityID: auth.IdentityID,
			Status: bridge.StatusFulfilled, Canonical: []byte(body)})
	}); err != nil {
		t.Fatalf("settle: %v", err)
	}
	return len(seen)
}

// checkFreed: the worker takes new work (for a stateful run the session too),
// unless finalising a stateful result failed and its incarnation was
// quarantined (§10.3, fail closed), which must then be visible.
func checkFreed(t *testing.T, s store.Store, auth store.Auth, sid string) {
	st, err := s.Worker(ctx, worker)
	want(t, err, nil)
	if !st.Online {
		if sid == "" {
			t.Fatal("the worker went offline")
		}
		_, err := register(t, s, incA, auth, caps(true, false))
		want(t, err, bridge.ErrWorkerQuarantined)
		return
	}
	if st.Busy {
		t.Fatal("the worker is still locked")
	}
	_, err = s.Enqueue(ctx, store.EnqueueParams{WorkerID: worker, AssignmentID: bridge.NewID(), LeaseTokenHash: "h",
		ExpiresAt: time.Now().Add(time.Minute), RuntimeSessionID: sid, ExecutionKind: bridge.KindSandbox, Request: []byte(`{}`)})
	want(t, err, nil)
}
