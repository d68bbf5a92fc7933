package worker

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// When the hub's store lost its state the hub answers STORE_RESET; the
// worker ends with "the hub's store was reset: pair this worker again" and
// the authentication exit code (not a bare "authentication failed").
func TestStoreResetEndsWorker(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "reset-vm")
	reply, _ := bridge.ParseObject([]byte(`{"run":{"stdout":"","stderr":"","code":0,"signal":null,"output":""},"language":"bash","version":"5"}`))
	r := start(t, baseConfig(h, id, path, constSupervisor{reply: reply}))
	h.waitReady(t, "reset-vm")
	err := h.store.Backend().Update(context.Background(), func(tx store.Txn) error {
		for _, k := range []string{"epoch", "{w:reset-vm}:rec", "{w:reset-vm}:reg"} {
			tx.Delete(k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = r.wait(t, 15*time.Second)
	if !errors.Is(err, ErrStoreReset) || ExitCode(err) != ExitAuth || err.Error() != "the hub's store was reset: pair this worker again" {
		t.Fatalf("worker ended with %v (exit %d)", err, ExitCode(err))
	}
}

// A settlement the hub could not store (503 STORE_UNAVAILABLE) is retried
// until it lands, within the assignment deadline.
func TestSettlementRetriedThroughStoreOutage(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "retry-vm")
	reply, _ := bridge.ParseObject([]byte(`{"run":{"stdout":"ok","stderr":"","code":0,"signal":null,"output":"ok"},"language":"bash","version":"5"}`))
	start(t, baseConfig(h, id, path, constSupervisor{reply: reply}))
	h.waitReady(t, "retry-vm")
	var refused atomic.Int32
	h.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/settle") || refused.Load() >= 3 {
			return false
		}
		refused.Add(1)
		w.Header().Set("Retry-After", "1")
		bridge.WriteError(w, bridge.ErrStoreUnavailable)
		return true
	})
	rep := h.exec(t, "bash", "echo ok", nil)
	if rep.status != 200 || !strings.Contains(string(rep.body), `"stdout":"ok"`) || refused.Load() != 3 {
		t.Fatalf("exec: %d %s after %d refused settlements", rep.status, rep.body, refused.Load())
	}
}
