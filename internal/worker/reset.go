package worker

import (
	"context"
	"fmt"

	"github.com/codellm/codellm/internal/bridge"
)

// ResetWorkspace is §10.4 steps 2–5 for a worker built without workspace tools: refresh the credential if
// due, register this (new) incarnation — fencing any stale one — discard the session locally, and ask the
// hub to delete the session's workspace fence. WORKER_BUSY (503) means an assignment is still active.
func (w *Worker) ResetWorkspace(ctx context.Context, runtimeSessionID string) error {
	if runtimeSessionID == "" || len(runtimeSessionID) > 512 {
		return fmt.Errorf("%w: runtime session ID must be 1–512 characters", ErrConfig)
	}
	if err := w.refreshIfDue(ctx); err != nil {
		return err
	}
	if err := w.register(ctx, false); err != nil {
		return err
	}
	if err := w.cfg.Supervisor.Reset(ctx, runtimeSessionID); err != nil {
		return fmt.Errorf("resetting the local session: %w", err)
	}
	body, err := bridge.Marshal(bridge.ResetRequest{ProtocolVersion: 1, IncarnationID: w.incarnation,
		RuntimeSessionID: runtimeSessionID, ConfirmDiscarded: true})
	if err != nil {
		return err
	}
	var rr bridge.ResetResponse
	if err := w.do(ctx, bridge.PathReset(w.cfg.WorkerID), body, w.cfg.Timing.RequestTimeout, &rr); err != nil {
		return err
	}
	if !rr.Reset {
		return fmt.Errorf("%w: reset reply without reset:true", ErrProtocol)
	}
	return nil
}
