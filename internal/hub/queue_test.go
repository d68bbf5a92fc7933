package hub

import (
	"context"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/hub/storetest"
)

// A replica that found a queue empty does not read it again for the next request (the store command per
// dispatch it spares), but does as soon as a request joined it — the join notifies every replica — and,
// for a join it did not hear (a replica of an older release), after queueHintTTL.
func TestQueueHintSparesRead(t *testing.T) {
	h, fb, _ := newFaultHub(t)
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	first := func(what string, want bool, wantCalls int) {
		t.Helper()
		tk := h.newTicket("default", "p", until)
		fb.Arm(0, storetest.FailBefore)
		ok, err := tk.first(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok != want || fb.Calls() != wantCalls {
			t.Fatalf("%s: first %v after %d store calls, want %v after %d", what, ok, fb.Calls(), want, wantCalls)
		}
	}
	first("an empty queue", true, 1)
	first("found empty a moment ago", true, 0)
	waiter := h.newTicket("default", "p", until)
	if full, err := waiter.join(ctx, 10); err != nil || full {
		t.Fatalf("join: %v %v", full, err)
	}
	first("a request joined", false, 1)
	waiter.leave(ctx)
	first("the request left", true, 1)
	// A join that notified nothing, as an older replica's.
	err := h.backend.Update(ctx, func(tx store.Txn) error {
		tx.Put(ticketKey("older"), []byte("r"), store.Volatile, tx.Now().Add(time.Minute))
		tx.ZAdd(queueKey("default", "p"), "older", float64(tx.Now().UnixMicro()), false)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first("an unheard join within the hint's life", true, 0)
	time.Sleep(queueHintTTL)
	first("an unheard join after the hint's life", false, 1)
}

// A read that a join's notification overtook is not trusted: the join may have come after it.
func TestQueueHintJoinDuringRead(t *testing.T) {
	var q queueHints
	gen := q.generation()
	q.joined("tq:t:p")
	q.foundEmpty("tq:t:p", gen)
	if q.empty("tq:t:p") {
		t.Fatal("a read made while a join was heard was trusted")
	}
	q.foundEmpty("tq:t:p", q.generation())
	if !q.empty("tq:t:p") {
		t.Fatal("a read with no join during it was not trusted")
	}
	q.joined("") // the change feed reconnected
	if q.empty("tq:t:p") {
		t.Fatal("a hint survived the change feed's loss")
	}
}
