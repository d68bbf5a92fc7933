// Package slots bounds how many runs execute at once. It is the one place where codellm's concurrency is
// limited: the chat endpoint, the runner API and the debugger all take a slot from the same Pool, so a
// debug session cannot starve production or the other way round without the operator seeing it.
//
// A run holds one slot whatever its number of blocks. Waiting is bounded: a caller that cannot get a slot
// within the queue timeout gets ErrBusy, which the HTTP layer turns into 429 with Retry-After.
package slots

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrBusy is returned when no slot became free within the queue timeout.
var ErrBusy = errors.New("all execution slots are busy")

// Pool is a counting semaphore with a bounded wait.
type Pool struct {
	sem      chan struct{}
	wait     time.Duration
	inFlight atomic.Int64
	waiting  atomic.Int64
}

// New returns a pool of n slots (n < 1 is treated as 1) whose Acquire waits at most queueTimeout.
func New(n int, queueTimeout time.Duration) *Pool {
	if n < 1 {
		n = 1
	}
	return &Pool{sem: make(chan struct{}, n), wait: queueTimeout}
}

// Acquire takes a slot, waiting at most the queue timeout. It returns the release function and how long it
// waited. ctx cancellation (the client went away) ends the wait with ctx.Err().
func (p *Pool) Acquire(ctx context.Context) (release func(), waited time.Duration, err error) {
	start := time.Now()
	select {
	case p.sem <- struct{}{}:
		return p.releaser(), 0, nil
	default:
	}
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	t := time.NewTimer(p.wait)
	defer t.Stop()
	select {
	case p.sem <- struct{}{}:
		return p.releaser(), time.Since(start), nil
	case <-t.C:
		return nil, time.Since(start), ErrBusy
	case <-ctx.Done():
		return nil, time.Since(start), ctx.Err()
	}
}

func (p *Pool) releaser() func() {
	p.inFlight.Add(1)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			p.inFlight.Add(-1)
			<-p.sem
		}
	}
}

// InFlight is the number of slots held now.
func (p *Pool) InFlight() int64 { return p.inFlight.Load() }

// Waiting is the number of callers queued for a slot now.
func (p *Pool) Waiting() int64 { return p.waiting.Load() }

// Size is the number of slots.
func (p *Pool) Size() int { return cap(p.sem) }
