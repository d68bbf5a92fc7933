package worker

import (
	"context"
	"testing"

	"github.com/codellm/codellm/internal/bridge"
)

// constSupervisor answers every call with one fixed runner reply, so the benchmark below measures the
// bridge (dispatch, lease, ack, heartbeat bookkeeping, settle) without a sandbox start.
type constSupervisor struct{ reply *bridge.Object }

func (c constSupervisor) Stateful() bool { return false }
func (c constSupervisor) Label() string  { return "bench" }
func (c constSupervisor) Execute(context.Context, RunnerCall) (*bridge.Object, error) {
	return c.reply, nil
}
func (constSupervisor) Reset(context.Context, string) error      { return nil }
func (constSupervisor) Quarantine(context.Context, string) error { return nil }

// BenchmarkBridgeRoundTrip: one /v1/exec through a real hub and a real worker loop, over loopback HTTP
// with signed requests, with a supervisor that returns at once.
func BenchmarkBridgeRoundTrip(b *testing.B) {
	h := newTestHub(b, nil)
	id, path := h.pair(b, "bench")
	reply, _ := bridge.ParseObject([]byte(`{"run":{"stdout":"1\n","stderr":"","code":0,"signal":null,"output":"1\n"},"language":"python","version":"3"}`))
	r := start(b, baseConfig(h, id, path, constSupervisor{reply: reply}))
	h.waitReady(b, "bench")
	b.ResetTimer()
	for b.Loop() {
		if rep := h.exec(b, "py", "print(1)", nil); rep.status != 200 {
			b.Fatalf("%d %s", rep.status, rep.body)
		}
	}
	b.StopTimer()
	_ = r.stop(b)
}

// BenchmarkExecPython: the same round trip executing python in the embedded runner and sandbox.
func BenchmarkExecPython(b *testing.B) {
	h := newTestHub(b, nil)
	id, path := h.pair(b, "bench")
	r := start(b, baseConfig(h, id, path, newEmbedded(b, false)))
	h.waitReady(b, "bench")
	b.ResetTimer()
	for b.Loop() {
		if rep := h.exec(b, "py", "print(1)", nil); rep.status != 200 {
			b.Fatalf("%d %s", rep.status, rep.body)
		}
	}
	b.StopTimer()
	_ = r.stop(b)
}

// BenchmarkSettlementEncode: serialising a settlement once (§4.3 rule 9) with a typical runner reply.
func BenchmarkSettlementEncode(b *testing.B) {
	res, _ := bridge.ParseObject([]byte(`{"language":"python","version":"3.12.0","run":{"stdout":"hello world\n","stderr":"","code":0,"signal":null,"output":"hello world\n","status":null,"wall_time":12,"cpu_time":9,"memory":1048576}}`))
	a := &bridge.Assignment{Generation: 7, LeaseToken: bridge.NewSecret()}
	inc := bridge.NewID()
	for b.Loop() {
		if _, err := bridge.Marshal(fulfillment(a, inc, res)); err != nil {
			b.Fatal(err)
		}
	}
}
