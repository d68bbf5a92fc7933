package main

import (
	"time"

	"github.com/codellm/codellm/internal/idempotency"
	"github.com/codellm/codellm/internal/wire"
)

// idempotencyFlags are serve's Idempotency-Key settings (README, the contract in brief).
type idempotencyFlags struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   int64
}

// guard builds the in-memory guard, or nil when the rule is disabled.
func (f *idempotencyFlags) guard() *idempotency.Guard {
	if f.ttl <= 0 {
		return nil
	}
	g := &idempotency.Guard{
		TTL: f.ttl,
		// The runner API's session header makes two identical bodies different requests.
		FingerprintHeaders: []string{wire.RuntimeSessionHeader},
	}
	g.Store = idempotency.NewMemory(idempotency.MemoryConfig{MaxEntries: f.maxEntries, MaxBytes: f.maxBytes,
		OnEvent: g.Event}) // the server sets g.OnEvent to its metrics later
	return g
}
