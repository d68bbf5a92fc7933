package hub

import (
	"context"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// A /v1/exec round trip through a real listener: client → hub → signed
// worker lease/ack/settle → client, with the bbolt store underneath; with the
// per-caller rate limit counting every request (a limit never reached) and
// without it, for the limiter's cost.
func BenchmarkExecRoundTrip(b *testing.B) {
	for _, c := range []struct {
		name   string
		limits RateLimits
	}{
		{"rate-limit=on", RateLimits{Exec: RateLimit{Max: 1 << 30, Window: time.Hour}}},
		{"rate-limit=off", RateLimits{Off: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := newTestHub(b, func(cfg *Config) { cfg.RateLimits = c.limits })
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
		})
	}
}

// The limiter alone: one request counted in the embedded store (one transaction).
func BenchmarkRateLimitTake(b *testing.B) {
	h := newTestHub(b, nil)
	l := &limiter{name: "exec", limit: RateLimit{Max: 1 << 30, Window: time.Hour}}
	ctx := context.Background()
	for b.Loop() {
		if _, _, err := l.take(ctx, h.replica.b, "default:key:bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// The same round trip on the stateful profile, every exec in one runtime session by its hint (a store
// session read per exec, and the session's worker as the only target), to compare with the above
// (rate-limit=off: the default limit would refuse a long run).
func BenchmarkExecRoundTripHinted(b *testing.B) {
	h := newTestHub(b, func(cfg *Config) { cfg.RateLimits.Off = true })
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
