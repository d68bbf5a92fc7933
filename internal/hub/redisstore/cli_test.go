package redisstore_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/hub"
)

// `codellm hub` selects the Redis store from --store redis://… or
// CODELLM_HUB_STORE=redis, and refuses what it cannot use before listening.
func TestCLIStoreSelection(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"redis kind without URL", map[string]string{"CODELLM_HUB_STORE": "redis"}, nil, "needs CODELLM_HUB_REDIS_URL"},
		{"redis kind with a path", map[string]string{"CODELLM_HUB_STORE": "redis"}, []string{"--store", "/tmp/x.db"}, "not a path"},
		{"unknown kind", map[string]string{"CODELLM_HUB_STORE": "etcd"}, nil, `store "etcd" is not available`},
		{"unreachable server", nil, []string{"--store", "redis://127.0.0.1:1/0"}, "connection refused"},
		{"bad database", nil, []string{"--store", "redis://127.0.0.1:6379/x"}, "invalid redis URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-token", adminToken, "--api-key", apiKey}, tc.args...)
			if rc := hub.RunCLI(args, &stdout, &stderr); rc != 1 || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "listening") {
				t.Fatalf("rc %d, stderr %q, want %q", rc, stderr.String(), tc.want)
			}
		})
	}
}
