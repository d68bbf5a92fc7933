package worker

import (
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
)

// A worker that dies after acknowledging (it leases and acks, then never speaks again): the client's
// request ends cleanly at its deadline with 504, and a new incarnation serves once the dead one's lock
// (deadline + store grace) has expired.
func TestCrashedWorkerInProcess(t *testing.T) {
	h := newTestHub(t, nil, boltstore.WithGrace(2*time.Second))
	id, path := h.pair(t, "dead")
	sup := newEmbedded(t, false)
	w, err := New(baseConfig(h, id, path, sup))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := w.register(ctx, false); err != nil {
		t.Fatal(err)
	}
	got := make(chan reply, 1)
	sent := time.Now()
	go func() { got <- h.exec(t, "bash", "echo never", map[string]string{"X-Codellm-Timeout-Ms": "1500"}) }()
	var a *bridge.Assignment
	for a == nil {
		if a, err = w.lease(ctx, -1); err != nil {
			t.Fatal(err)
		}
	}
	body, _ := bridge.Marshal(bridge.AckRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, Generation: a.Generation, LeaseToken: a.LeaseToken})
	if err := w.do(ctx, bridge.PathAck("dead", a.AssignmentID), body, time.Second, &bridge.AcceptedResponse{}); err != nil {
		t.Fatal(err)
	}
	// ... and the first incarnation is gone.
	if rep := <-got; rep.status != 504 {
		t.Fatalf("client: %d %s", rep.status, rep.body)
	}
	t.Logf("504 after %v", time.Since(sent))
	r := start(t, baseConfig(h, id, path, sup))
	r.waitRegistered(t)
	t.Logf("registered after %v", time.Since(sent))
	rep := h.exec(t, "bash", "echo revived", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "revived\n" {
		t.Fatalf("after: %d %s", rep.status, rep.body)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
