package hub

import (
	"testing"

	"github.com/codellm/codellm/internal/bridge"
)

// A /v1/exec round trip through a real listener: client → hub → signed
// worker lease/ack/settle → client, with the bbolt store underneath.
func BenchmarkExecRoundTrip(b *testing.B) {
	h := newTestHub(b, nil)
	w := newWorker(b, h, "bench-vm")
	w.pair(h)
	w.mustRegister()
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, w.incarnation) })
	defer stop()
	for b.Loop() {
		if r := h.client(b, "/v1/exec", `{"lang":"py","code":"x"}`, nil); r.status != 200 {
			b.Fatalf("%d %s", r.status, r.body)
		}
	}
}

// The same round trip on the stateful profile, every exec in one runtime session by its hint (a store
// session read per exec, and the session's worker as the only target), to compare with the above.
func BenchmarkExecRoundTripHinted(b *testing.B) {
	h := newTestHub(b, nil)
	w := newWorker(b, h, "bench-vm")
	w.caps.StatefulWorkspace = true
	w.pair(h)
	w.mustRegister()
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, w.incarnation) })
	defer stop()
	hdr := map[string]string{expectedProfileHeader: profileStateful}
	for b.Loop() {
		if r := h.client(b, "/v1/exec", `{"lang":"py","code":"x","runtime_session_hint":"v2:user:bench"}`, hdr); r.status != 200 {
			b.Fatalf("%d %s", r.status, r.body)
		}
	}
}
