package server_test

import (
	"net/http"
	"testing"

	"github.com/codellm/codellm/internal/engine"
)

// printEnv answers with the exposed variables a block sees, sorted.
var printEnv = block("python", `import json, os
names = sorted(k for k in os.environ if k.startswith(("KRISP_", "GH_", "UNRELATED")))
print(json.dumps({"answer": ",".join(names)}))`)

// Both ways through the real endpoint: a role's declaration narrows what the operator exposed, and a
// declaration naming more than the operator exposed gains nothing.
func TestRoleEnvNarrowsTheOperatorsExposure(t *testing.T) {
	ts := startServer(t, options{allowed: []string{"python"}, ecfg: func(c *engine.Config) {
		c.Exposed = []string{"GH_TOKEN=c", "KRISP_BASE_URL=b", "KRISP_TOKEN=a"}
	}})
	for _, tc := range []struct {
		name string
		bag  map[string]any
		want string
	}{
		{"no declaration", map[string]any{"depth": 1}, "GH_TOKEN,KRISP_BASE_URL,KRISP_TOKEN"},
		{"narrowed by name", map[string]any{"env_passthrough": []string{"KRISP_TOKEN"}}, "KRISP_TOKEN"},
		{"narrowed by prefix", map[string]any{"env_prefix": []string{"KRISP_"}}, "KRISP_BASE_URL,KRISP_TOKEN"},
		{"cannot widen", map[string]any{"env_passthrough": []string{"KRISP_TOKEN", "UNRELATED"}, "env_prefix": []string{"UNREL"}}, "KRISP_TOKEN"},
	} {
		st, _, body := ts.post(t, "/v1/chat/completions", chatWithBag(printEnv, tc.bag))
		_, calls := decodeCompletion(t, st, body)
		if got := calls[len(calls)-1].Args["answer"]; got != tc.want {
			t.Errorf("%s: block sees %q, want %q", tc.name, got, tc.want)
		}
	}
	st, _, body := ts.post(t, "/v1/chat/completions", chatWithBag(printEnv, map[string]any{"env_passthrough": "KRISP_TOKEN"}))
	wantError(t, st, body, http.StatusBadRequest, "invalid_fleet_input", "env_passthrough must be a list")
}
