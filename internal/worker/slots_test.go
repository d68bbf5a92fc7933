package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// concurrentSupervisor counts how many executions run at once and holds each until released.
type concurrentSupervisor struct {
	constSupervisor
	now, peak atomic.Int64
	release   chan struct{}
}

func (c *concurrentSupervisor) Execute(ctx context.Context, call RunnerCall) (*bridge.Object, error) {
	n := c.now.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	defer c.now.Add(-1)
	select {
	case <-c.release:
	case <-ctx.Done():
		return nil, &RunError{Message: "aborted", KnownClean: true}
	}
	return c.constSupervisor.Execute(ctx, call)
}

// A worker asking for lease slots runs that many assignments at once through one registration, and each
// settles with its own result; without slots it runs one at a time.
func TestLeaseSlotsRunConcurrently(t *testing.T) {
	for _, slots := range []int{1, 3} {
		h := newTestHub(t, nil)
		id, path := h.pair(t, "slots")
		reply, _ := bridge.ParseObject([]byte(`{"run":{"stdout":"ok\n","stderr":"","code":0,"signal":null,"output":"ok\n"},"language":"python","version":"3"}`))
		sup := &concurrentSupervisor{constSupervisor: constSupervisor{reply: reply}, release: make(chan struct{})}
		cfg := baseConfig(h, id, path, sup)
		cfg.LeaseSlots = slots
		r := start(t, cfg)
		h.waitReady(t, "slots")
		var wg sync.WaitGroup
		var ok atomic.Int64
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if rep := h.exec(t, "py", "print(1)", nil); rep.status == 200 {
					ok.Add(1)
				}
			}()
		}
		for end := time.Now().Add(5 * time.Second); sup.peak.Load() < int64(slots) && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		}
		time.Sleep(300 * time.Millisecond) // time for a fourth run to start, were there one
		if p := sup.peak.Load(); p != int64(slots) {
			t.Fatalf("%d slots: %d assignments ran at once", slots, p)
		}
		close(sup.release)
		wg.Wait()
		if ok.Load() != 3 {
			t.Fatalf("%d slots: %d of 3 requests answered 200\n%s", slots, ok.Load(), r.logs.String())
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	}
}
