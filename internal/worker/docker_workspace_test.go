package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nsjailFiles writes the seccomp profile and /pkgs directory docker-nsjail requires.
func nsjailFiles(t *testing.T) (prof, pkgs string) {
	t.Helper()
	dir := t.TempDir()
	prof = filepath.Join(dir, "seccomp.json")
	pkgs = filepath.Join(dir, "pkgs")
	if err := os.WriteFile(prof, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(pkgs, 0o755); err != nil {
		t.Fatal(err)
	}
	return prof, pkgs
}

// `codellm hub` → `codellm worker --runtime-supervisor docker-nsjail --allow-workspace-commands`: the
// command runs in the workspace's own runtime container (the image has no python3; the host, which the
// embedded command sandbox would use, does), against the workspace mounted at /mnt/workspace, as the
// directory's owner; the route admits only the worker's HMAC capability (differential: no token and a
// wrong one are 401, the container's own token 200); runner sessions never see the workspace.
func TestE2EDockerRuntimeCommands(t *testing.T) {
	cli, ref := runtimeImage(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed on the host (the differential needs it)")
	}
	prof, pkgs := nsjailFiles(t)
	h := startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
	w := pairProc(t, h, "e2e:rtcmd")
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // the container runs as the workspace's owner: make it an unprivileged one
		os.Chown(dir, 65534, 65534)
		os.Chown(filepath.Join(dir, "sub"), 65534, 65534)
	}
	w.run(t, "--runtime-supervisor", "docker-nsjail", "--runtime-image", ref, "--container-cli", cli,
		"--container-sandbox", "besteffort", "--docker-seccomp-profile", prof, "--docker-packages-path", pkgs,
		"--runtimes", "bash", "--worker-dir", dir, "--allow-workspace-commands", "--allow-workspace-writes")
	h.waitReady(t, "e2e:rtcmd")
	name := ContainerName(WorkspaceCommandSession("e2e:rtcmd", "primary"))
	t.Cleanup(func() { _ = exec.Command(cli, "container", "rm", "--force", name).Run() })
	command := func(cmd string, cwd *string) map[string]any {
		return workspaceCommand(t, h, "e2e:rtcmd", cmd, cwd, nil)
	}
	sub := "sub"
	res := command(`command -v python3 || echo "no python3"; echo made > made.txt; pwd`, &sub)
	if res["exitCode"] != float64(0) || res["stdout"] != "no python3\n/mnt/workspace/sub\n" {
		t.Fatalf("command in the runtime container: %v", res)
	}
	checkRuntimeCommands(t, cli, h, dir, name, command)
	// Without --allow-workspace-writes the root is mounted read-only: the same write fails.
	ro := pairProc(t, h, "e2e:rtro")
	roDir := t.TempDir()
	if os.Geteuid() == 0 {
		os.Chown(roDir, 65534, 65534)
	}
	ro.run(t, "--runtime-supervisor", "docker-nsjail", "--runtime-image", ref, "--container-cli", cli,
		"--container-sandbox", "besteffort", "--docker-seccomp-profile", prof, "--docker-packages-path", pkgs,
		"--runtimes", "bash", "--worker-dir", roDir, "--allow-workspace-commands")
	h.waitReady(t, "e2e:rtro")
	roName := ContainerName(WorkspaceCommandSession("e2e:rtro", "primary"))
	t.Cleanup(func() { _ = exec.Command(cli, "container", "rm", "--force", roName).Run() })
	res = workspaceCommand(t, h, "e2e:rtro", `echo x > ro.txt`, nil, nil)
	if res["exitCode"] == float64(0) || !strings.Contains(fmt.Sprint(res["stderr"]), "Read-only file system") {
		t.Errorf("write to a read-only workspace: %v", res)
	}
	if _, err := os.Stat(filepath.Join(roDir, "ro.txt")); !os.IsNotExist(err) {
		t.Errorf("a read-only workspace was written: %v", err)
	}
}

// workspaceCommand sends one execute_command to worker through the hub's /v1/workspace-tools.
func workspaceCommand(t *testing.T, h *hubProc, worker, cmd string, cwd *string, extra map[string]any) map[string]any {
	t.Helper()
	req := map[string]any{"protocolVersion": 1, "operation": "execute_command", "workspaceId": "primary", "command": cmd}
	if cwd != nil {
		req["cwd"] = *cwd
	}
	for k, v := range extra {
		req[k] = v
	}
	body, _ := json.Marshal(map[string]any{"workerId": worker, "request": req})
	// Ready comes with the first registration; the workspace tools with the negotiated one after it.
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rep := h.post(t, context.Background(), "/v1/workspace-tools", string(body), nil)
		if rep.status == 400 && strings.Contains(string(rep.body), "WORKER_MISMATCH") && time.Now().Before(end) {
			continue
		}
		var m struct{ Result map[string]any }
		if err := json.Unmarshal(rep.body, &m); err != nil || rep.status != 200 || m.Result == nil {
			t.Fatalf("execute_command %q: %d %s", cmd, rep.status, rep.body)
		}
		return m.Result
	}
}

// checkRuntimeCommands: the file belongs to the workspace owner, exit status and timeout come back as
// §9.8 says, the route admits only the capability, and runner sessions never see the workspace.
func checkRuntimeCommands(t *testing.T, cli string, h *hubProc, dir, name string, command func(string, *string) map[string]any) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, "sub", "made.txt"))
	if err != nil {
		t.Fatalf("the command's file is not in the host workspace: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && st.Uid != 65534 {
		t.Fatalf("the command's file belongs to uid %d, not to the workspace owner", st.Uid)
	}
	if res := command(`exit 3`, nil); res["exitCode"] != float64(3) {
		t.Fatalf("exit status: %v", res)
	}
	// 2 s, not less: the timeout runs from the container's runner accepting the request, and on a loaded
	// host bash may not have printed "started" within a shorter one (the output-before-kill check below).
	if res := workspaceCommand(t, h, "e2e:rtcmd", `echo started; while :; do :; done`, nil, map[string]any{"timeoutMs": 2000}); res["timedOut"] != true || res["exitCode"] != nil || res["stdout"] != "started\n" {
		t.Fatalf("timeout: %v", res)
	}
	// The capability: the same request inside the container without it, with a wrong one, with its own.
	post := func(tokenExpr string) string {
		t.Helper()
		script := `exec curl --silent --output /dev/null --write-out '%{http_code}' --request POST --header 'Content-Type: application/json' ` +
			`--header 'X-Runtime-Session-Id: ` + WorkspaceCommandSession("e2e:rtcmd", "primary") + `' ` + tokenExpr +
			` --data '{"command":"echo forged > forged.txt"}' http://127.0.0.1:2000/api/v2/workspace/execute`
		out, err := exec.Command(cli, "exec", name, "sh", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("curl in the container: %v %s", err, out)
		}
		return string(out)
	}
	if got := post(""); got != "401" {
		t.Errorf("no token: %s", got)
	}
	if got := post(`--header 'X-LibreChat-Workspace-Token: ` + strings.Repeat("A", 43) + `'`); got != "401" {
		t.Errorf("wrong token: %s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "forged.txt")); !os.IsNotExist(err) {
		t.Fatalf("a request without the capability ran: %v", err)
	}
	if got := post(`--header "X-LibreChat-Workspace-Token: $SANDBOX_EXTERNAL_WORKSPACE_TOKEN"`); got != "200" {
		t.Errorf("the container's token: %s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "forged.txt")); err != nil {
		t.Errorf("with the capability the request ran nothing: %v", err)
	}
	// A runner session (code execution) is another container, without the workspace.
	rep := h.exec(t, "bash", `ls /mnt/workspace 2>&1; echo "exit $?"`, nil)
	m := decodeExec(t, rep)
	if sid, _ := m["session_id"].(string); sid != "" { // a runtime session's container outlives the worker
		t.Cleanup(func() { _ = exec.Command(cli, "container", "rm", "--force", ContainerName(sid)).Run() })
	}
	if rep.status != 200 || !strings.Contains(fmt.Sprint(m["stdout"]), "exit 2") {
		t.Errorf("/v1/exec sees the workspace: %d %s", rep.status, rep.body)
	}
}
