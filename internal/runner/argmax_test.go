package runner

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestArgsEnvWithinLimitsNever500 (red-team item 7): args/env_vars inside the documented limits (env_vars
// ≤ 1 MiB) reached execve's E2BIG and came back as 500. A single string over the kernel's MAX_ARG_STRLEN
// is now a 400 naming the limit, and requests at each limit run.
func TestArgsEnvWithinLimitsNever500(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.MaxBodyBytes = 8 << 20 })
	big := strings.Repeat("v", 200<<10) // 200 KiB: under the 1 MiB env_vars total, over MAX_ARG_STRLEN
	for _, c := range []struct {
		name string
		req  ExecuteRequest
		msg  string
	}{
		{"one 200 KiB env var", withEnv(code("bash", "true"), map[string]string{"BIG": big}), "env_vars: BIG=… is 204804 bytes (at most 131071"},
		{"one 200 KiB arg", withArgs(code("bash", "true"), big), "args[0] is 204800 bytes (at most 131071"},
		{"600 KiB of args", withArgs(code("bash", "true"), strings.Split(strings.Repeat(strings.Repeat("a", 100<<10)+"\x01", 6), "\x01")[:6]...), "args: 614454 bytes in total (at most 524288)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr.t = t
			status, body, _ := tr.do(http.MethodPost, PathExecute, c.req, nil)
			if msg, _ := body["message"].(string); status != 400 || !strings.Contains(msg, c.msg) {
				t.Fatalf("got %d %v, want 400 %q", status, body, c.msg)
			}
		})
	}
	// At the limits it runs: 7 env vars of MAX_ARG_STRLEN (~900 KiB, under 1 MiB) and 4 args of 120 KiB.
	env := map[string]string{}
	for i := range 7 {
		k := fmt.Sprintf("V%d", i)
		env[k] = strings.Repeat("e", maxArgStrlen-len(k)-1)
	}
	arg := strings.Repeat("a", 120<<10)
	req := withArgs(withEnv(code("bash", `echo "$# ${#V6} ${#1}"`), env), arg, arg, arg, arg)
	tr.t = t
	status, body, _ := tr.do(http.MethodPost, PathExecute, req, nil)
	run, _ := body["run"].(map[string]any)
	if status != 200 || run["stdout"] != fmt.Sprintf("4 %d %d\n", maxArgStrlen-3, 120<<10) {
		t.Fatalf("at the limits: %d %v", status, body)
	}
}

func withEnv(r ExecuteRequest, env map[string]string) ExecuteRequest { r.EnvVars = env; return r }
func withArgs(r ExecuteRequest, args ...string) ExecuteRequest       { r.Args = args; return r }
