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
