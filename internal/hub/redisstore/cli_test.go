package redisstore_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/redisstore"
)

// `codellm hub` selects the Redis store from --store redis://… or
// CODELLM_HUB_STORE=redis, and refuses what it cannot use before listening.
func TestCLIStoreSelection(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
		rc   int // config.ExitUsage for a setting, ExitUnavailable for a server that cannot be had
	}{
		{"redis kind without URL", map[string]string{"CODELLM_HUB_STORE": "redis"}, nil, "needs CODELLM_HUB_REDIS_URL", 2},
		{"redis kind with a path", map[string]string{"CODELLM_HUB_STORE": "redis"}, []string{"--store", "/tmp/x.db"}, "not a path", 2},
		{"unknown kind", map[string]string{"CODELLM_HUB_STORE": "etcd"}, nil, `store "etcd" is not available`, 2},
		{"unreachable server", nil, []string{"--store", "redis://127.0.0.1:1/0"}, "connection refused", 6},
		{"bad database", nil, []string{"--store", "redis://127.0.0.1:6379/x"}, "invalid redis URL", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-token", adminToken, "--api-key", apiKey}, tc.args...)
			if rc := hub.RunCLI(args, &stdout, &stderr); rc != tc.rc || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "listening") {
				t.Fatalf("rc %d, stderr %q, want %q", rc, stderr.String(), tc.want)
			}
		})
	}
}

// With Redis the hub refuses a server that may evict keys (unless the
// operator insists with --redis-allow-eviction, then warns) and warns when
// neither AOF nor RDB persists the data.
func TestCLIRedisChecks(t *testing.T) {
	rp := startOwnRedis(t, "--maxmemory-policy", "allkeys-lru", "--save", "", "--appendonly", "no")
	serve := func(extra ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		args := append([]string{"serve", "--admin-token", adminToken, "--api-key", apiKey, "--store", rp.url()}, extra...)
		return hub.RunCLI(args, &stdout, &stderr), stderr.String()
	}
	rc, out := serve("--listen", "127.0.0.1:0")
	if rc != 6 || !strings.Contains(out, `maxmemory-policy is "allkeys-lru"`) || strings.Contains(out, "listening") {
		t.Fatalf("eviction allowed: rc %d, stderr %q", rc, out)
	}
	// Insisting gets past the check (the listener then fails: port 99999).
	rc, out = serve("--listen", "127.0.0.1:99999", "--redis-allow-eviction")
	if rc != 6 || !strings.Contains(out, "warning: redis maxmemory-policy") || !strings.Contains(out, "neither AOF") ||
		!strings.Contains(out, "--listen 127.0.0.1:99999") {
		t.Fatalf("--redis-allow-eviction: rc %d, stderr %q", rc, out)
	}
	st, err := redisstore.Open(context.Background(), rp.url())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	set, err := st.Check(context.Background())
	if err != nil || set.Safe() || set.Persistent() {
		t.Fatalf("settings %+v %v", set, err)
	}
	c := rp.client()
	defer c.Close()
	c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction")
	c.ConfigSet(context.Background(), "appendonly", "yes")
	if set, err := st.Check(context.Background()); err != nil || !set.Safe() || !set.Persistent() || !set.AOF {
		t.Fatalf("settings after CONFIG SET %+v %v", set, err)
	}
	// Turning AOF on starts a rewrite in a forked child that outlives the server's SIGKILL at cleanup and
	// kept writing into the data directory while it was removed (CI: "directory not empty"): let it end.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		info, err := c.Info(context.Background(), "persistence").Result()
		if err == nil && strings.Contains(info, "aof_rewrite_in_progress:0") && strings.Contains(info, "aof_rewrite_scheduled:0") {
			return
		}
	}
	t.Fatal("the AOF rewrite did not end within 10 s")
}
