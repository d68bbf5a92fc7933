package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/testhelp"
)

// Workspace commands through `codellm hub` → `codellm worker`: with --command-allowed-domains a command
// reaches exactly the allowed name through the egress proxy; without it (differential) the same command
// has no network; a direct connection past the proxy never works; /v1/exec uses the worker's own
// --network-allow.
func TestE2ECommandAllowedDomains(t *testing.T) {
	if sandboxFlag(t) != "native" {
		t.Skip("egress needs the native sandbox's network namespace")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	port := testhelp.Origin(t)
	h := startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
	command := func(id, cmd string) map[string]any {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"workerId": id, "request": map[string]any{"protocolVersion": 1,
			"operation": "execute_command", "workspaceId": "primary", "command": cmd}})
		rep := h.post(t, context.Background(), "/v1/workspace-tools", string(body), nil)
		var m struct{ Result map[string]any }
		if err := json.Unmarshal(rep.body, &m); err != nil || rep.status != 200 || m.Result == nil {
			t.Fatalf("execute_command: %d %s", rep.status, rep.body)
		}
		return m.Result
	}
	curl := `curl -sS "http://localhost:` + port + `/x"`

	for _, tc := range []struct {
		id      string
		domains []string
		want    string
	}{
		{"eg:open", []string{"--command-allowed-domains", "localhost,127.0.0.1", "--network-allow", "localhost,127.0.0.1"}, "origin saw localhost:" + port},
		{"eg:closed", nil, "Failed to connect to localhost"},
	} {
		w := pairProc(t, h, tc.id)
		dir := t.TempDir()
		if os.Geteuid() == 0 {
			os.Chown(dir, 65534, 65534) // commands run as the workspace's owner, never as host root (issue 14)
		}
		w.run(t, append([]string{"--worker-dir", dir, "--allow-workspace-commands"}, tc.domains...)...)
		h.waitReady(t, tc.id)
		res := command(tc.id, curl)
		if out := fmt.Sprint(res["stdout"], res["stderr"]); !strings.Contains(out, tc.want) {
			t.Errorf("%s: command got %v, want %q", tc.id, res, tc.want)
		}
	}
	res := command("eg:open", `curl -sS "http://denied.invalid/"; curl -sS --noproxy '*' "http://127.0.0.1:`+port+`/x"; echo "direct exit $?"`)
	if out := fmt.Sprint(res["stdout"]); !strings.Contains(out, "denied.invalid is not on the network allow-list") || !strings.Contains(out, "direct exit 7") {
		t.Errorf("denied name and direct connection: %v", res)
	}
	rep := h.exec(t, "bash", curl, map[string]string{"X-Codellm-Worker-Id": "eg:open"})
	if m := decodeExec(t, rep); rep.status != 200 || !strings.Contains(fmt.Sprint(m["stdout"]), "origin saw localhost") {
		t.Errorf("/v1/exec through the worker's --network-allow: %d %s", rep.status, rep.body)
	}
}
