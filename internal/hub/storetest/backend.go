package storetest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/hub/store"
)

// RunBackend checks the store.Backend primitives themselves, on which the
// protocol and other hub state (idempotency records, file indexes) rely:
// records with lifetimes, read-your-writes transactions that commit all or
// nothing, atomic read-modify-write under concurrency, sets, set-once keys
// and the epoch.
func RunBackend(t *testing.T, newBackend BackendFactory) {
	t.Run("Records", func(t *testing.T) { testRecords(t, newBackend(t)) })
	t.Run("Transactions", func(t *testing.T) { testTransactions(t, newBackend(t)) })
	t.Run("Concurrency", func(t *testing.T) { testConcurrency(t, newBackend(t)) })
	t.Run("SetsOnceEpoch", func(t *testing.T) { testSetsOnceEpoch(t, newBackend(t)) })
	t.Run("SortedSets", func(t *testing.T) { testSortedSets(t, newBackend(t)) })
}

// testSortedSets: order by score then member, keep, removal, counting from a score, an atomic pop that
// never hands one member to two callers, and writes applied only with their transaction.
func testSortedSets(t *testing.T, b store.Backend) {
	t.Cleanup(func() { _ = b.Close() })
	z := func(fn func(tx store.Txn)) { t.Helper(); write(t, b, fn) }
	z(func(tx store.Txn) {
		tx.ZAdd("t:z", "c", 3, false)
		tx.ZAdd("t:z", "b", 1, false)
		tx.ZAdd("t:z", "a", 1, false)
		tx.ZAdd("t:z", "d", 5, false)
	})
	z(func(tx store.Txn) {
		tx.ZAdd("t:z", "a", 9, true)  // keep: a stays at 1
		tx.ZAdd("t:z", "d", 0, false) // update: d moves first
		tx.ZRem("t:z", "c")
	})
	if m, ok, err := b.ZFirst(ctx, "t:z"); err != nil || !ok || m != "d" {
		t.Fatalf("first %q %v %v", m, ok, err)
	}
	for _, c := range []struct {
		min  float64
		want int
	}{{0, 3}, {1, 2}, {1.5, 0}, {-1, 3}} {
		if n, err := b.ZCount(ctx, "t:z", c.min); err != nil || n != c.want {
			t.Fatalf("count from %v: %d %v, want %d", c.min, n, err, c.want)
		}
	}
	var got []string
	for {
		m, ok, err := b.ZPopMin(ctx, "t:z")
		want(t, err, nil)
		if !ok {
			break
		}
		got = append(got, m)
	}
	if !slices.Equal(got, []string{"d", "a", "b"}) {
		t.Fatalf("pop order %v", got)
	}
	if _, ok, _ := b.ZFirst(ctx, "t:empty"); ok {
		t.Fatal("first of an empty set")
	}
	z(func(tx store.Txn) {
		for i := range 10 {
			tx.ZAdd("t:b", strconv.Itoa(i), float64(i), false)
		}
		tx.ZRemBelow("t:b", 7)
	})
	if n, _ := b.ZCount(ctx, "t:b", 0); n != 3 {
		t.Fatalf("after remove-below: %d members", n)
	}
	_ = b.Update(ctx, func(tx store.Txn) error { tx.ZAdd("t:b", "x", 0, false); return store.Abort(errors.New("no")) })
	if m, _, _ := b.ZFirst(ctx, "t:b"); m != "7" {
		t.Fatalf("an aborted transaction's ZAdd was applied (first %q)", m)
	}
	testConcurrentPops(t, b)
}

// testConcurrentPops: concurrent pops hand out each member once.
func testConcurrentPops(t *testing.T, b store.Backend) {
	const n = 50
	write(t, b, func(tx store.Txn) {
		for i := range n {
			tx.ZAdd("t:p", strconv.Itoa(i), float64(i), false)
		}
	})
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, ok, err := b.ZPopMin(ctx, "t:p")
				if err != nil || !ok {
					return
				}
				mu.Lock()
				seen[m]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d distinct members popped, want %d", len(seen), n)
	}
	for m, c := range seen {
		if c != 1 {
			t.Fatalf("member %s popped %d times", m, c)
		}
	}
}

// write commits the writes fn makes.
func write(t *testing.T, b store.Backend, fn func(tx store.Txn)) {
	t.Helper()
	want(t, b.Update(ctx, func(tx store.Txn) error { fn(tx); return nil }), nil)
}

func put(t *testing.T, b store.Backend, key, val string, class store.Class, exp time.Time) {
	t.Helper()
	want(t, b.Update(ctx, func(tx store.Txn) error { tx.Put(key, []byte(val), class, exp); return nil }), nil)
}

func read(t *testing.T, b store.Backend, keys ...string) []string {
	t.Helper()
	vals, err := b.Read(ctx, keys...)
	want(t, err, nil)
	out := make([]string, len(vals))
	for i, v := range vals {
		if v == nil {
			out[i] = "<nil>"
		} else {
			out[i] = string(v)
		}
	}
	return out
}

func testRecords(t *testing.T, b store.Backend) {
	t.Cleanup(func() { _ = b.Close() })
	put(t, b, "t:durable", "d", store.Durable, time.Time{})
	put(t, b, "t:short", "s", store.Volatile, time.Now().Add(150*time.Millisecond))
	if got := read(t, b, "t:durable", "t:short", "t:absent"); !slices.Equal(got, []string{"d", "s", "<nil>"}) {
		t.Fatalf("read %v", got)
	}
	time.Sleep(200 * time.Millisecond)
	if got := read(t, b, "t:durable", "t:short"); !slices.Equal(got, []string{"d", "<nil>"}) {
		t.Fatalf("after expiry %v", got)
	}
	want(t, b.Update(ctx, func(tx store.Txn) error { tx.Delete("t:durable"); return nil }), nil)
	if got := read(t, b, "t:durable"); got[0] != "<nil>" {
		t.Fatalf("after delete %v", got)
	}
}

func testTransactions(t *testing.T, b store.Backend) {
	t.Cleanup(func() { _ = b.Close() })
	refused := errors.New("refused")
	// Reads see the transaction's own writes; a plain error still commits.
	err := b.Update(ctx, func(tx store.Txn) error {
		tx.Put("t:a", []byte("1"), store.Volatile, time.Time{})
		v, err := tx.Get("t:a", "t:b")
		if err != nil || string(v[0]) != "1" || v[1] != nil {
			t.Errorf("read own writes: %q %v", v, err)
		}
		tx.Delete("t:a")
		if v, _ := tx.Get("t:a"); v[0] != nil {
			t.Errorf("read own delete: %q", v)
		}
		tx.Put("t:b", []byte("2"), store.Durable, time.Time{})
		return refused
	})
	want(t, err, refused)
	if got := read(t, b, "t:a", "t:b"); !slices.Equal(got, []string{"<nil>", "2"}) {
		t.Fatalf("after a refusal %v", got)
	}
	// Abort writes nothing and returns the cause.
	err = b.Update(ctx, func(tx store.Txn) error {
		tx.Put("t:b", []byte("3"), store.Durable, time.Time{})
		tx.Put("t:c", []byte("3"), store.Volatile, time.Time{})
		return store.Abort(refused)
	})
	if !errors.Is(err, refused) {
		t.Fatalf("abort: %v", err)
	}
	if _, abort := store.IsAbort(err); abort {
		t.Fatal("Update returned the Abort marker instead of its cause")
	}
	if got := read(t, b, "t:b", "t:c"); !slices.Equal(got, []string{"2", "<nil>"}) {
		t.Fatalf("after an abort %v", got)
	}
}

// testConcurrency: read-modify-write transactions never lose an update.
func testConcurrency(t *testing.T, b store.Backend) {
	t.Cleanup(func() { _ = b.Close() })
	const n = 24
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.Update(ctx, func(tx store.Txn) error {
				v, err := tx.Get("t:counter")
				if err != nil {
					return err
				}
				c, _ := strconv.Atoi(string(v[0]))
				tx.Put("t:counter", []byte(strconv.Itoa(c+1)), store.Durable, time.Time{})
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := read(t, b, "t:counter"); got[0] != strconv.Itoa(n) {
		t.Fatalf("counter %s after %d increments", got[0], n)
	}
}

func testSetsOnceEpoch(t *testing.T, b store.Backend) {
	t.Cleanup(func() { _ = b.Close() })
	want(t, b.Update(ctx, func(tx store.Txn) error { tx.SetAdd("t:set", "x"); tx.SetAdd("t:set", "y"); return nil }), nil)
	want(t, b.Update(ctx, func(tx store.Txn) error { tx.SetRemove("t:set", "x"); return nil }), nil)
	if m, err := b.Members(ctx, "t:set"); err != nil || !slices.Equal(m, []string{"y"}) {
		t.Fatalf("members %v %v", m, err)
	}
	now := time.Now().Add(time.Second)
	for i, wantOK := range []bool{true, false} {
		if ok, err := b.InsertNew(ctx, "t:once", time.Minute, now); err != nil || ok != wantOK {
			t.Fatalf("insert %d: %v %v", i, ok, err)
		}
	}
	if ok, err := b.InsertNew(ctx, "t:old", time.Minute, time.Now().Add(-time.Hour)); err != nil || ok {
		t.Fatalf("a key dated before the store's memory began was accepted: %v %v", ok, err)
	}
	e1, err := b.Epoch(ctx, true)
	if err != nil || e1 == "" {
		t.Fatalf("epoch %q %v", e1, err)
	}
	if e2, err := b.Epoch(context.Background(), false); err != nil || e2 != e1 {
		t.Fatalf("epoch changed: %q %q %v", e1, e2, err)
	}
}
