package worker

// Cross-process tests: the real `codellm` binary runs as hub and worker on loopback.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/testhelp"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// codellmBinary builds ./cmd/codellm once per test binary.
func codellmBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("cross-process test skipped in -short mode")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "codellm-e2e-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "codellm")
		cmd := exec.Command("go", "build", "-o", binPath, "../../cmd/codellm")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // a cgo build refuses the native sandbox
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out.String())
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// removeBinDir removes the cross-process tests' build (22 MB) when the test binary ends: it was left in
// the temp dir on every run.
func removeBinDir() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// proc is one child process with its combined output captured.
type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(codellmBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%v output:\n%s", args[:min(2, len(args))], p.out.String())
		}
	})
	return p
}

// stop ends the process as an operator does (SIGTERM, then SIGKILL after 20 s, a hang bound): a worker
// stopped so closes its runner, which unmounts its workspace tmpfs and removes its work dir.
func (p *proc) stop() { testhelp.StopGracefully(p.cmd.Process, p.done, 20*time.Second) }

// kill SIGKILLs the process (a crash) unless it has exited, and reaps it.
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitOutput waits until the output contains s.
func (p *proc) waitOutput(t *testing.T, s string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(p.out.String(), s) {
			return
		}
	}
	t.Fatalf("output never contained %q:\n%s", s, p.out.String())
}

// exitCode waits for the process to end within d.
func (p *proc) exitCode(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("process did not exit within %v; output:\n%s", d, p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

func runCmd(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(codellmBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

var listenRe = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

type hubProc struct {
	*proc
	url, addr, store string
}

// startHubProc runs `codellm hub` on addr ("127.0.0.1:0" for any port) with the store at dbPath.
func startHubProc(t *testing.T, addr, dbPath string) *hubProc {
	t.Helper()
	p := startProc(t, nil, "hub", "serve", "--listen", addr, "--admin-token", adminToken, "--api-key", apiKey, "--store", dbPath)
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if m := listenRe.FindStringSubmatch(p.out.String()); m != nil {
			return &hubProc{proc: p, url: m[1], addr: strings.TrimPrefix(m[1], "http://"), store: dbPath}
		}
		select {
		case <-p.done:
			t.Fatalf("hub exited: %s", p.out.String())
		default:
		}
	}
	t.Fatalf("hub did not start: %s", p.out.String())
	return nil
}

func (h *hubProc) post(t *testing.T, ctx context.Context, path, body string, hdr map[string]string) reply {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return doHTTP(t, req)
}

func (h *hubProc) exec(t *testing.T, lang, code string, hdr map[string]string) reply {
	b, _ := json.Marshal(map[string]string{"lang": lang, "code": code})
	return h.post(t, context.Background(), "/v1/exec", string(b), hdr)
}

func (h *hubProc) status(t *testing.T, workerID string) bridge.StatusResponse {
	req, _ := http.NewRequest(http.MethodGet, h.url+"/v1"+bridge.PathStatus(workerID), nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	var st bridge.StatusResponse
	_ = json.Unmarshal(doHTTP(t, req).body, &st)
	return st
}

func (h *hubProc) waitReady(t *testing.T, workerID string) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if h.status(t, workerID).Ready {
			return
		}
	}
	t.Fatalf("worker %s never became ready", workerID)
}

// e2eWorker holds a paired worker's files. work is the TMPDIR its processes get: the embedded runner
// makes its codellm-runner-* directory (and, as root, a tmpfs per workspace) there, so each test's workers
// have their own, and a restarted worker sweeps what a crashed one left, as on a real host.
type e2eWorker struct {
	id, home, identity, work string
	env                      []string
}

// workRoot makes a fresh work root for a worker's runner (testhelp.NewWorkDir).
func workRoot(t *testing.T) string { return testhelp.NewWorkDir(t, "codellm-e2e-") }

func sandboxFlag(t *testing.T) string {
	sb, err := testSandbox()
	if err != nil {
		t.Fatal(err)
	}
	return string(sb.Mode())
}

// pairProc pairs through the CLIs: `codellm hub pair` prints the code, `codellm worker pair` redeems it.
func pairProc(t *testing.T, h *hubProc, workerID string) *e2eWorker {
	t.Helper()
	code, rc := runCmd(t, nil, "hub", "pair", workerID, "--url", h.url+"/v1", "--admin-token", adminToken)
	if rc != 0 {
		t.Fatalf("hub pair: %d %s", rc, code)
	}
	home := t.TempDir()
	work := workRoot(t)
	w := &e2eWorker{id: workerID, home: home, work: work, env: []string{"HOME=" + home, "TMPDIR=" + work}}
	w.identity = DefaultIdentityPath(home, workerID)
	out, rc := runCmd(t, w.env, "worker", "pair", h.url+"/v1", strings.TrimSpace(code), "--worker-id", workerID)
	if rc != 0 || !strings.Contains(out, "Paired worker "+workerID+". Identity saved to "+w.identity) {
		t.Fatalf("worker pair: %d %s", rc, out)
	}
	return w
}

func (w *e2eWorker) run(t *testing.T, extra ...string) *proc {
	args := append([]string{"worker", "run", "--worker-id", w.id, "--sandbox", sandboxFlag(t), "--lease-wait", "2s", "--allowed-programs", "python,bash"}, extra...)
	return startProc(t, w.env, args...)
}

// pair → run → python through /v1/exec and /v1/chat/completions across processes; the worker rides out a
// hub restart (backoff) on the same store; a revoked worker exits 3.
func TestE2EPairRunRestartRevoke(t *testing.T) {
	h := startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
	w := pairProc(t, h, "e2e:vm")
	// LIBRECHAT_CODE_* alias for the identity file, and a workspace to check the CLI wiring.
	dir := t.TempDir()
	worker := startProc(t, append(w.env, "LIBRECHAT_CODE_IDENTITY_FILE="+w.identity), "worker", "run", "--sandbox", sandboxFlag(t),
		"--lease-wait", "2s", "--allowed-programs", "python,bash", "--worker-dir", dir)
	h.waitReady(t, "e2e:vm")

	rep := h.exec(t, "py", "print(sum(range(10)))", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "45\n" {
		t.Fatalf("exec: %d %s", rep.status, rep.body)
	}
	chat := `{"model":"codellm","messages":[{"role":"user","content":"` +
		"```python\\nimport json; print(json.dumps({'answer': 'e2e %d' % 42}))\\n```" + `"}]}`
	rep = h.post(t, context.Background(), "/v1/chat/completions", chat, nil)
	if rep.status != 200 || !strings.Contains(string(rep.body), "e2e 42") {
		t.Fatalf("chat: %d %s", rep.status, rep.body)
	}
	var st bridge.StatusResponse
	if st = h.status(t, "e2e:vm"); !strings.Contains(string(mustCanonical(t, st.Capabilities)), `"workspaces":[{"id":"primary","name":"`+filepath.Base(dir)+`"`) {
		t.Fatalf("capabilities %s", mustCanonical(t, st.Capabilities))
	}

	// Hub restart on the same address and store: the worker reconnects with backoff.
	h.kill()
	time.Sleep(1500 * time.Millisecond)
	h2 := startHubProc(t, h.addr, h.store)
	h2.waitReady(t, "e2e:vm")
	rep = h2.exec(t, "bash", "echo back", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "back\n" {
		t.Fatalf("exec after restart: %d %s", rep.status, rep.body)
	}
	if !strings.Contains(worker.out.String(), "codellm worker: reconnecting after") {
		t.Fatalf("no reconnect logged:\n%s", worker.out.String())
	}

	// Revoke: the worker's next call is refused and it exits 3.
	if out, rc := runCmd(t, nil, "hub", "revoke", "e2e:vm", "--url", h2.url+"/v1", "--admin-token", adminToken); rc != 0 {
		t.Fatalf("revoke: %d %s", rc, out)
	}
	if rc := worker.exitCode(t, 20*time.Second); rc != ExitAuth {
		t.Fatalf("revoked worker exit %d:\n%s", rc, worker.out.String())
	}
}

func mustCanonical(t *testing.T, r bridge.Raw) []byte {
	b, err := r.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The hub notices a crashed worker: SIGKILL during a run ends the client's request cleanly at its
// deadline (504), and a restarted worker process (a new incarnation) serves again once the dead
// incarnation's lock has expired.
func TestE2ECrashedWorker(t *testing.T) {
	h := startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
	w := pairProc(t, h, "crashy")
	p := w.run(t)
	h.waitReady(t, "crashy")
	got := make(chan reply, 1)
	sent := time.Now()
	go func() {
		got <- h.exec(t, "bash", "sleep 30; echo never", map[string]string{"X-Codellm-Timeout-Ms": "2500"})
	}()
	time.Sleep(1500 * time.Millisecond)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.exitCode(t, 10*time.Second)
	leaked := testhelp.MountsUnder(t, w.work) // as root: the killed run's workspace tmpfs
	rep := <-got
	if rep.status != 504 || !strings.Contains(string(rep.body), "execution_timeout") {
		t.Fatalf("crashed worker: %d %s", rep.status, rep.body)
	}
	// The hub keeps an acknowledged, unsettled assignment's lock until its deadline plus the store's 30 s
	// grace (§7.3 step 7): a new incarnation is WORKER_BUSY until then. Start it afterwards so the test
	// does not sit out a long reconnect backoff.
	time.Sleep(time.Until(sent.Add(2500*time.Millisecond + 30*time.Second)))
	// Until the new incarnation registers, the dead one still looks online (its registration lives for
	// leaseTtlMs), so a request sent now would be dispatched to it and lock the worker again.
	p2 := w.run(t)
	p2.waitOutput(t, "registered incarnation")
	var last reply
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if last = h.exec(t, "bash", "echo revived", map[string]string{"X-Codellm-Timeout-Ms": "10000"}); last.status == 200 {
			break
		}
	}
	if m := decodeExec(t, last); last.status != 200 || m["stdout"] != "revived\n" {
		t.Fatalf("after restart: %d %s\n%s", last.status, last.body, p2.out.String())
	}
	_ = p2.cmd.Process.Signal(syscall.SIGTERM)
	if rc := p2.exitCode(t, 20*time.Second); rc != 0 {
		t.Fatalf("drained worker exit %d", rc)
	}
	// A drained worker closes its Sandbox: its pooled run cgroups (and any other) go with it.
	if left := testhelp.CgroupsOf(t, p2.cmd.Process.Pid); len(left) > 0 {
		t.Errorf("the drained worker left run cgroups: %q", left)
	}
	// The killed incarnation's run workspace (a tmpfs as root) was swept by the restarted one, whose own
	// went with its SIGTERM: nothing stays mounted on the host.
	if m := testhelp.MountsUnder(t, w.work); len(m) != 0 {
		t.Fatalf("mounts left under the workers' TMPDIR: %q (the SIGKILL left %q)", m, leaked)
	}
	if len(leaked) == 0 {
		t.Log("the killed worker left no mount (workspaces are not mounted tmpfs here): the sweep check saw nothing")
	}
}

// The quarantine CLI flow: a marker makes `worker run` exit 5; clear-workspace-quarantine refuses while a
// worker holds the run lock, otherwise removes it; the worker then registers.
func TestE2EQuarantineClear(t *testing.T) {
	h := startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
	w := pairProc(t, h, "qcli")
	dir := t.TempDir()
	id, err := LoadIdentity(w.identity, "qcli")
	if err != nil {
		t.Fatal(err)
	}
	marker, err := MarkerPath(w.home, id.CodeAPIURL, "qcli", dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ArmMarker(marker, Marker{WorkerID: "qcli", WorkspaceID: "primary", OwnerID: bridge.NewID(), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	p := w.run(t, "--worker-dir", dir, "--allow-workspace-writes")
	if rc := p.exitCode(t, 30*time.Second); rc != ExitQuarantined || !strings.Contains(p.out.String(), "codellm worker: quarantined") {
		t.Fatalf("run with marker: exit %d\n%s", rc, p.out.String())
	}
	// While a worker (without the workspace) holds the run lock, clearing is refused.
	holder := w.run(t)
	h.waitReady(t, "qcli")
	if out, rc := runCmd(t, w.env, "worker", "clear-workspace-quarantine", "--worker-dir", dir, "--worker-id", "qcli"); rc != 1 || !strings.Contains(out, "run lock") {
		t.Fatalf("clear beside a live worker: %d %s", rc, out)
	}
	_ = holder.cmd.Process.Signal(syscall.SIGTERM)
	holder.exitCode(t, 20*time.Second)
	out, rc := runCmd(t, w.env, "worker", "clear-workspace-quarantine", "--worker-dir", dir, "--worker-id", "qcli")
	if rc != 0 || !strings.Contains(out, "cleared workspace mutation quarantine for primary") {
		t.Fatalf("clear: %d %s", rc, out)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("marker still there: %v", err)
	}
	p = w.run(t, "--worker-dir", dir, "--allow-workspace-writes")
	p.waitOutput(t, "registered incarnation")
	caps := string(mustCanonical(t, h.status(t, "qcli").Capabilities))
	if !strings.Contains(caps, `"write_file"`) {
		t.Fatalf("capabilities after clear: %s", caps)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if rc := p.exitCode(t, 20*time.Second); rc != 0 {
		t.Fatalf("exit %d", rc)
	}
}
