package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// Lease slots (LibreChat's workspaceLeaseSlots): a worker that asks for K slots and is granted them by
// the hub runs K lease loops, each long-polling for and running one assignment at a time, so one
// registration serves a machine that runs K sandboxes at once. Each assignment keeps its own heartbeat,
// cancellation poll and settlement (execute.go). A hub that grants none (an older hub, or one that sends
// no workspaceLeaseSlots) gets the single loop. Workspace mutations are never run in parallel: a writable
// or command-enabled workspace asks for no slots.

// slotRegisterEvery is how often the slots' loops register (the worker's heartbeat between leases).
const slotRegisterEvery = 5 * time.Second

// wantSlots checks the slot request and puts it in the capabilities.
func (w *Worker) wantSlots(cfg Config) error {
	if cfg.LeaseSlots <= 1 {
		return nil
	}
	if cfg.LeaseSlots > bridge.MaxLeaseSlots {
		return fmt.Errorf("%w: at most %d lease slots", ErrConfig, bridge.MaxLeaseSlots)
	}
	if cfg.Workspace != nil && slices.ContainsFunc(cfg.Workspace.Operations(), isMutation) {
		return fmt.Errorf("%w: a writable or command-enabled workspace runs one assignment at a time (lease slots must be 1)", ErrConfig)
	}
	w.want.WorkspaceLeaseSlots = cfg.LeaseSlots
	return nil
}

// runSlots registers (retrying like the main loop), then runs one loop per granted slot until drain or
// hard ends them or one meets a fatal error, which stops the others.
func (w *Worker) runSlots(drain, hard context.Context) error {
	for attempt := 0; ; attempt++ {
		if drain.Err() != nil || hard.Err() != nil {
			return nil
		}
		err := w.refreshIfDue(drain)
		if err == nil {
			err = w.register(drain, false)
		}
		if err == nil {
			break
		}
		if f := fatal(err); f != nil {
			return f
		}
		w.logf("reconnecting after %v", err)
		if !sleepCtx(drain, Backoff(attempt, rand.Float64(), w.cfg.Timing.ReconnectBase, w.cfg.Timing.ReconnectCap)) {
			return nil
		}
	}
	k := min(int(w.granted.Load()), w.cfg.LeaseSlots)
	if k <= 1 {
		return w.loop(drain, hard, -1)
	}
	w.logf("running %d lease slots", k)
	ctx, stop := context.WithCancel(drain)
	defer stop()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for slot := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.loop(ctx, hard, slot); err != nil {
				once.Do(func() { first = err; stop() })
			}
		}()
	}
	wg.Wait()
	return first
}
