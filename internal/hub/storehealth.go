package hub

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// storeHealth is what the hub knows about its store: whether it is
// reachable (every failed operation and every readiness probe tell), the
// epoch of its data (learned at start) and a detected reset — the store
// came back empty or with another epoch, so every worker credential is gone.
type storeHealth struct {
	down atomic.Bool

	mu    sync.Mutex
	epoch string
	reset *storeReset
}

// storeReset is a detected loss of the store's state, reported by /readyz.
type storeReset struct {
	DetectedAt    string `json:"detectedAt"`
	PreviousEpoch string `json:"previousEpoch"`
	Epoch         string `json:"epoch"`
}

// storeRetryAfter is the Retry-After (seconds) of a store_unavailable answer.
const storeRetryAfter = 1

// storeRetryStep is how often an in-flight assignment asks an unavailable store again.
const storeRetryStep = 100 * time.Millisecond

const resetMessage = "the hub's store lost its state (it came back empty or with another epoch): every worker credential is gone; pair each worker again (codellm hub pair <workerId>)"

// storeFailed is told of every store operation (err nil: the store
// answered). It counts failures by operation and logs when the store goes
// from reachable to unreachable and back (once each, not per request).
func (h *Hub) storeFailed(op string, err error) {
	if err == nil {
		h.storeOK()
		return
	}
	h.metrics.StoreErrors.WithLabelValues(op).Inc()
	if errors.Is(err, store.ErrUnavailable) && !h.health.down.Swap(true) {
		h.cfg.Logger.Error("store unavailable; answering 503 store_unavailable until it returns", "operation", op, "err", err)
	}
}

// storeOK records that the store answered, logging the recovery.
func (h *Hub) storeOK() {
	if h.health.down.Load() && h.health.down.Swap(false) {
		h.cfg.Logger.Info("store reachable again")
	}
}

// checkEpoch reads the store's epoch: the first reading is adopted (created
// on a fresh store); a missing or different one later is a reset, logged
// once and reported until the hub restarts. It fails when the store cannot
// be reached.
func (h *Hub) checkEpoch(ctx context.Context) error {
	cur, err := h.store.Epoch(ctx, false)
	if err != nil {
		return err
	}
	h.health.mu.Lock()
	known := h.health.epoch
	h.health.mu.Unlock()
	if cur != "" && cur == known {
		h.storeOK()
		return nil
	}
	// First start (adopt, creating it on an empty store) or a reset (a
	// new epoch, shared with the other replicas through the store).
	if cur == "" {
		if cur, err = h.store.Epoch(ctx, true); err != nil {
			return err
		}
	}
	h.storeOK()
	h.health.mu.Lock()
	defer h.health.mu.Unlock()
	if h.health.epoch == known {
		h.health.epoch = cur
		if known != "" && cur != known {
			h.health.reset = &storeReset{DetectedAt: bridge.FormatTime(time.Now()), PreviousEpoch: known, Epoch: cur}
			h.cfg.Logger.Error(resetMessage, "epoch", cur, "previous_epoch", known)
		}
	}
	return nil
}

// storeWasReset reports a reset, checking the store first (a worker whose
// credential is unknown may be the first to notice).
func (h *Hub) storeWasReset(ctx context.Context) bool {
	_ = h.checkEpoch(ctx)
	h.health.mu.Lock()
	defer h.health.mu.Unlock()
	return h.health.reset != nil
}

// serveReady is /readyz: 503 while the store cannot be reached (and why);
// 200 otherwise, naming a detected reset (the hub can serve: workers must
// be paired again, which goes through this hub). /healthz stays liveness.
func (h *Hub) serveReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := h.checkEpoch(ctx); err != nil {
		w.Header().Set("Retry-After", "1")
		writeValue(w, http.StatusServiceUnavailable, map[string]string{
			"status": "unavailable", "store": "unreachable", "code": "store_unavailable", "reason": err.Error()})
		return
	}
	h.health.mu.Lock()
	reset := h.health.reset
	h.health.mu.Unlock()
	if reset != nil {
		writeValue(w, http.StatusOK, map[string]any{"status": "ready", "store": "reset", "reset": reset, "message": resetMessage})
		return
	}
	writeValue(w, http.StatusOK, map[string]string{"status": "ready", "store": "ok"})
}

// errStoreUnavailable is the client-facing answer to a store outage.
func errStoreUnavailable() *clientError {
	return &clientError{status: http.StatusServiceUnavailable, code: "store_unavailable",
		message: "The hub's store is unavailable; retry later", retryAfter: storeRetryAfter}
}

// retryStore runs a store call again while the store is unavailable, until
// until (the assignment's deadline), so that an in-flight assignment
// survives a short outage.
func (h *Hub) retryStore(until time.Time, fn func() error) error {
	for {
		err := fn()
		if err == nil || !errors.Is(err, store.ErrUnavailable) || !time.Now().Before(until) {
			return err
		}
		select {
		case <-time.After(min(storeRetryStep, time.Until(until))):
		case <-h.closing:
			return err
		}
	}
}
