package main

import (
	"flag"
	"time"

	"github.com/codellm/codellm/internal/idempotency"
)

// idempotencyFlags are serve's Idempotency-Key settings (README, the contract in brief).
type idempotencyFlags struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   byteSize
}

func registerIdempotencyFlags(fs *flag.FlagSet) *idempotencyFlags {
	f := &idempotencyFlags{maxBytes: 64 << 20}
	fs.DurationVar(&f.ttl, "idempotency-ttl", 10*time.Minute, "how long a response to an Idempotency-Key (or a Stainless client retry) is replayed; 0 disables the rule")
	fs.IntVar(&f.maxEntries, "idempotency-max-entries", 10000, "recorded responses kept at most (oldest out first)")
	fs.Var(&f.maxBytes, "idempotency-max-bytes", "bytes of recorded responses kept at most (oldest out first)")
	return f
}

// guard builds the in-memory guard, or nil when the rule is disabled.
func (f *idempotencyFlags) guard() *idempotency.Guard {
	if f.ttl <= 0 {
		return nil
	}
	g := &idempotency.Guard{
		TTL: f.ttl,
		// The runner API's session header makes two identical bodies different requests.
		FingerprintHeaders: []string{"X-Runtime-Session-Id"},
	}
	g.Store = idempotency.NewMemory(idempotency.MemoryConfig{MaxEntries: f.maxEntries, MaxBytes: int64(f.maxBytes),
		OnEvent: g.Event}) // the server sets g.OnEvent to its metrics later
	return g
}
