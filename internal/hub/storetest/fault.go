package storetest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/hub/store"
)

// Mode is how a FaultBackend fails the primitive call it is armed for.
type Mode int

const (
	// FailBefore fails without touching the store (a refused connection).
	FailBefore Mode = iota
	// FailAfter applies the call and then reports a failure (the reply was
	// lost): the caller cannot tell whether it happened.
	FailAfter
	// Timeout blocks until the caller's context ends, without applying.
	Timeout
	// TimeoutAfter applies the call, then blocks until the context ends.
	TimeoutAfter
)

func (m Mode) String() string {
	return [...]string{"fail-before", "fail-after", "timeout", "timeout-after"}[m]
}

// ErrInjected is the cause of every injected failure; it matches
// store.ErrUnavailable.
var ErrInjected = store.Unavailable(errors.New("storetest: injected store failure"))

// FaultBackend wraps a store.Backend and fails one chosen primitive call
// (counting every Update, Read, Members, InsertNew and Epoch from 1), or
// every call while Down is set.
type FaultBackend struct {
	store.Backend

	mu    sync.Mutex
	calls int
	at    int // 0: disarmed
	mode  Mode
	down  bool
}

// NewFaultBackend wraps b; it injects nothing until Arm or SetDown.
func NewFaultBackend(b store.Backend) *FaultBackend { return &FaultBackend{Backend: b} }

// Arm makes the n-th call from now fail in mode m.
func (f *FaultBackend) Arm(n int, m Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls, f.at, f.mode = 0, n, m
}

// SetDown fails every call (FailBefore) while down is true: an outage.
func (f *FaultBackend) SetDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// Calls reports how many calls were made since Arm.
func (f *FaultBackend) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// next counts a call and reports whether and how it fails.
func (f *FaultBackend) next() (bool, Mode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return true, FailBefore
	}
	f.calls++
	if f.at != 0 && f.calls == f.at {
		return true, f.mode
	}
	return false, 0
}

// run applies op under the fault plan.
func (f *FaultBackend) run(ctx context.Context, op func() error) error {
	fail, m := f.next()
	if !fail {
		return op()
	}
	if m == FailAfter || m == TimeoutAfter {
		_ = op()
	}
	if m == Timeout || m == TimeoutAfter {
		// Bounded even for a caller without a deadline.
		select {
		case <-ctx.Done():
			return store.Unavailable(ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
	return ErrInjected
}

// Update implements store.Backend.
func (f *FaultBackend) Update(ctx context.Context, fn func(store.Txn) error) error {
	return f.run(ctx, func() error { return f.Backend.Update(ctx, fn) })
}

// Read implements store.Backend.
func (f *FaultBackend) Read(ctx context.Context, keys ...string) ([][]byte, error) {
	var out [][]byte
	err := f.run(ctx, func() error {
		var err error
		out, err = f.Backend.Read(ctx, keys...)
		return err
	})
	return out, err
}

// Members implements store.Backend.
func (f *FaultBackend) Members(ctx context.Context, set string) ([]string, error) {
	var out []string
	err := f.run(ctx, func() error {
		var err error
		out, err = f.Backend.Members(ctx, set)
		return err
	})
	return out, err
}

// InsertNew implements store.Backend.
func (f *FaultBackend) InsertNew(ctx context.Context, key string, ttl time.Duration, notBefore time.Time) (bool, error) {
	var ok bool
	err := f.run(ctx, func() error {
		var err error
		ok, err = f.Backend.InsertNew(ctx, key, ttl, notBefore)
		return err
	})
	return ok, err
}

// Epoch implements store.Backend.
func (f *FaultBackend) Epoch(ctx context.Context, create bool) (string, error) {
	var v string
	err := f.run(ctx, func() error {
		var err error
		v, err = f.Backend.Epoch(ctx, create)
		return err
	})
	return v, err
}

// ZPopMin implements store.Backend.
func (f *FaultBackend) ZPopMin(ctx context.Context, key string) (string, bool, error) {
	var m string
	var ok bool
	err := f.run(ctx, func() error {
		var err error
		m, ok, err = f.Backend.ZPopMin(ctx, key)
		return err
	})
	return m, ok, err
}

// ZFirst implements store.Backend.
func (f *FaultBackend) ZFirst(ctx context.Context, key string) (string, bool, error) {
	var m string
	var ok bool
	err := f.run(ctx, func() error {
		var err error
		m, ok, err = f.Backend.ZFirst(ctx, key)
		return err
	})
	return m, ok, err
}

// ZCount implements store.Backend.
func (f *FaultBackend) ZCount(ctx context.Context, key string, min float64) (int, error) {
	var n int
	err := f.run(ctx, func() error {
		var err error
		n, err = f.Backend.ZCount(ctx, key, min)
		return err
	})
	return n, err
}
