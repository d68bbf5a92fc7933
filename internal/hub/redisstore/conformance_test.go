package redisstore_test

import (
	"context"
	"testing"

	"github.com/codellm/codellm/internal/hub/redisstore"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/hub/storetest"
)

func openStore(t testing.TB, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	u := needRedis(t)
	s, err := redisstore.Open(context.Background(), u, append([]redisstore.Option{redisstore.WithPrefix(freshPrefix())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) store.Store {
		return openStore(t, redisstore.WithLeaseTTL(cfg.LeaseTTL), redisstore.WithGrace(cfg.Grace))
	})
}

// The protocol over the Redis backend survives a failure or timeout at
// every primitive call without losing or double-settling an assignment.
func TestFaults(t *testing.T) {
	storetest.RunFaults(t, func(t *testing.T) store.Backend { return openStore(t).Backend() })
}

// The whole conformance suite also holds through the fault wrapper when it
// injects nothing (the wrapper itself changes no behaviour).
func TestConformanceThroughFaultWrapper(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) store.Store {
		b := storetest.NewFaultBackend(openStore(t).Backend())
		return store.NewProtocol(b, store.Options{LeaseTTL: cfg.LeaseTTL, Grace: cfg.Grace})
	})
}

// The Redis backend's primitives (what other hub state builds on).
func TestBackend(t *testing.T) {
	storetest.RunBackend(t, func(t *testing.T) store.Backend { return openStore(t).Backend() })
}
