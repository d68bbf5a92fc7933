package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/egress"
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
	command := func(id, cmd string) map[string]any { t.Helper(); return workspaceCommand(t, h, id, cmd, nil, nil) }
	curl := `curl -sS "http://localhost:` + port + `/x"`
	status := "" // the eg:open worker's --metrics-listen

	for _, tc := range []struct {
		id      string
		domains []string
		want    string
	}{
		{"eg:open", []string{"--command-allowed-domains", "localhost,127.0.0.1", "--network-allow", "localhost,127.0.0.1", "--metrics-listen", "127.0.0.1:0"}, "origin saw localhost:" + port},
		{"eg:closed", nil, "Failed to connect to localhost"},
	} {
		w := pairProc(t, h, tc.id)
		dir := t.TempDir()
		if os.Geteuid() == 0 {
			os.Chown(dir, 65534, 65534) // commands run as the workspace's owner, never as host root (issue 14)
		}
		p := w.run(t, append([]string{"--worker-dir", dir, "--allow-workspace-commands"}, tc.domains...)...)
		h.waitReady(t, tc.id)
		if tc.id == "eg:open" {
			p.waitOutput(t, "metrics_listen=")
			status = "http://" + metricsAddrRe.FindStringSubmatch(p.out.String())[1]
		}
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
	checkWorkerStatus(t, status)
	checkHubNarrowing(t, h, curl, port)
}

// checkHubNarrowing: a /v1/exec or chat request through the hub narrows the worker's list (the narrowed
// list reaches the worker's proxy: localhost is then refused) and can never widen it (a precise 400 from
// the worker's check, relayed by the hub; a malformed list is the hub's own 400).
func checkHubNarrowing(t *testing.T, h *hubProc, curl, port string) {
	t.Helper()
	pin := map[string]string{"X-Codellm-Worker-Id": "eg:open"}
	exec := func(allow string) (int, string) {
		b, _ := json.Marshal(map[string]any{"lang": "bash", "code": curl, "metadata": map[string]string{"network_allow": allow}})
		rep := h.post(t, context.Background(), "/v1/exec", string(b), pin)
		return rep.status, string(rep.body)
	}
	if st, body := exec("127.0.0.1,LOCALHOST."); st != 200 || !strings.Contains(body, "origin saw localhost:"+port) {
		t.Errorf("/v1/exec with an equal list: %d %s", st, body)
	}
	if st, body := exec("127.0.0.1"); st != 200 || !strings.Contains(body, "localhost is not on the network allow-list") {
		t.Errorf("/v1/exec narrowed to 127.0.0.1: %d %s", st, body)
	}
	if st, body := exec("localhost,example.com"); st != 400 || !strings.Contains(body, `invalid_request`) ||
		!strings.Contains(body, `field \"metadata.network_allow\": invalid network allow-list: \"example.com\" is not on the operator's allow-list`) {
		t.Errorf("/v1/exec widening: %d %s", st, body)
	}
	if st, body := exec("*"); st != 400 || !strings.Contains(body, `invalid_request`) || !strings.Contains(body, `metadata.network_allow\": invalid network allow-list: a bare \"*\" would allow every destination`) {
		t.Errorf("/v1/exec malformed list: %d %s", st, body)
	}
	chat := func(allow string) (int, string) {
		b, _ := json.Marshal(map[string]any{"model": "codellm", "metadata": map[string]string{"network_allow": allow},
			"messages": []map[string]string{{"role": "user", "content": "```bash\n" + `out=$(` + curl + ` 2>&1); printf '{"answer":"%s"}' "$(printf %s "$out" | tr -d '"\\' | tr '\n' ' ')"` + "\n```"}}})
		rep := h.post(t, context.Background(), "/v1/chat/completions", string(b), pin)
		return rep.status, string(rep.body)
	}
	if st, body := chat("127.0.0.1"); st != 200 || !strings.Contains(body, "localhost is not on the network allow-list") {
		t.Errorf("chat narrowed to 127.0.0.1: %d %s", st, body)
	}
	if st, body := chat("example.com"); st != 400 || !strings.Contains(body, "invalid_metadata") || !strings.Contains(body, `\"example.com\" is not on the operator's allow-list`) {
		t.Errorf("chat widening: %d %s", st, body)
	}
}

var metricsAddrRe = regexp.MustCompile(`metrics_listen=(127\.0\.0\.1:\d+)`)

// checkWorkerStatus reads the eg:open worker's --metrics-listen: each decision above counted once in its
// scope (commands: the allowed curl and the denied name; runs: the /v1/exec curl), and /readyz listing
// both proxies' normalised allow-lists with their digest.
func checkWorkerStatus(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`codellm_worker_egress_connections_total{decision="allowed",reason="allowed",scope="commands"} 1`,
		`codellm_worker_egress_connections_total{decision="refused",reason="not_allowed",scope="commands"} 1`,
		`codellm_worker_egress_connections_total{decision="allowed",reason="allowed",scope="runs"} 1`,
		`codellm_worker_egress_connections_total{decision="refused",reason="not_allowed",scope="runs"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("worker metrics lack %s", want)
		}
	}
	resp, err = http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rd struct {
		Ready  bool
		Egress map[string]struct {
			Enabled bool
			Allow   []string
			Digest  string
		}
	}
	json.NewDecoder(resp.Body).Decode(&rd)
	resp.Body.Close()
	pol, _ := egress.ParseList("127.0.0.1,localhost")
	for _, scope := range []string{"runs", "commands"} {
		e := rd.Egress[scope]
		if resp.StatusCode != 200 || !rd.Ready || !e.Enabled || strings.Join(e.Allow, ",") != "127.0.0.1,localhost" || e.Digest != pol.Digest() {
			t.Errorf("worker /readyz %s: %d %+v", scope, resp.StatusCode, rd)
		}
	}
}
