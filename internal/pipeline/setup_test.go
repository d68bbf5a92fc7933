package pipeline

import (
	"context"
	"testing"
)

// Every started block reports how long its sandbox took to start (the server's
// codellm_sandbox_setup_seconds); a block that never started reports zero rather than a made-up time.
func TestSetupTimeReported(t *testing.T) {
	forModes(t, func(t *testing.T, h *harness) {
		res := h.run(t, context.Background(), Request{Steps: []Step{sh(t, `echo hi`), sh(t, `cat`)}})
		wantOK(t, res)
		for i, b := range res.Blocks {
			if b.Setup <= 0 {
				t.Errorf("block %d: Setup = %v, want > 0", i, b.Setup)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res = h.run(t, ctx, Request{Steps: []Step{sh(t, `echo hi`)}})
		for i, b := range res.Blocks {
			if b.Outcome != OutcomeCancelled || b.Setup != 0 {
				t.Errorf("pre-cancelled run, block %d: outcome %q, Setup %v (want cancelled, 0)", i, b.Outcome, b.Setup)
			}
		}
	})
}
