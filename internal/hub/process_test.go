package hub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/config"
)

// hubProcess is `codellm hub` running as a separate OS process (the test
// binary re-executed through TestMain).
type hubProcess struct {
	cmd  *exec.Cmd
	url  string // http://addr
	done chan error
}

func startHubProcess(t *testing.T, env []string, args ...string) *hubProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"serve"}, args...)...)
	cmd.Env = append(append(os.Environ(), "CODELLM_HUB_TEST_PROCESS=1"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &hubProcess{cmd: cmd, done: make(chan error, 1)}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		p.done <- cmd.Wait()
	}()
	timeout := time.After(10 * time.Second)
	for p.url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("hub process exited before listening")
			}
			if _, addr, found := strings.Cut(l, "listening on "); found {
				p.url = addr
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatal("hub process did not start")
		}
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *hubProcess) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("hub process did not exit")
	}
	return nil
}

// Across real processes: the admin CLI pairs a worker, the hub is killed
// with SIGKILL and restarted on the same bbolt file, identities and fences
// survive, a pre-restart proof is refused, and SIGTERM drains a long poll.
func TestHubProcessRestart(t *testing.T) {
	store := filepath.Join(t.TempDir(), "hub", "bridge.db")
	env := []string{"LIBRECHAT_CODE_HUB_ADMIN_TOKEN=" + adminToken} // alias spelling
	p := startHubProcess(t, env, "--listen", "127.0.0.1:0", "--api-key", apiKey, "--store", store)
	base := p.url + "/v1"

	if r, _ := http.Get(p.url + "/healthz"); r == nil || r.StatusCode != 200 {
		t.Fatalf("healthz: %v", r)
	} else {
		r.Body.Close()
	}
	// `codellm hub pair` prints the code.
	var out, errb bytes.Buffer
	lookup := func(k string) (string, bool) {
		if k == "CODELLM_HUB_URL" {
			return base, true
		}
		return "", false
	}
	if rc := runCLI(context.Background(), []string{"pair", "proc:vm", "--admin-token", adminToken}, &out, &errb, lookup); rc != 0 {
		t.Fatalf("hub pair: rc %d: %s", rc, errb.String())
	}
	code := strings.TrimSpace(out.String())
	pub, priv, _ := bridge.GenerateKey()
	pubPEM, _ := bridge.MarshalPublicKeyPEM(pub)
	w := &testWorker{t: t, base: base, id: "proc:vm", priv: priv, pubPEM: pubPEM, incarnation: bridge.NewID(),
		caps: bridge.Capabilities{SandboxProfile: "codellm-embedded", Runtimes: []string{"python"}}}
	r := w.redeem(code, pubPEM)
	if r.status != 200 {
		t.Fatalf("redeem: %d %s", r.status, r.body)
	}
	var cr bridge.CredentialResponse
	if err := json.Unmarshal(r.body, &cr); err != nil {
		t.Fatal(err)
	}
	w.credential = cr.Credential
	incA := w.incarnation
	w.mustRegister()
	w.incarnation = bridge.NewID() // B fences A
	w.mustRegister()

	// Keep one signed request to replay after the restart.
	body, _ := bridge.Marshal(bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: w.id, IncarnationID: w.incarnation, Capabilities: w.caps})
	proof := bridge.SignRequest(priv, w.credential, "POST", "/v1"+bridge.PathRegister(), body, time.Now())
	replay := func() reply {
		req, _ := http.NewRequest(http.MethodPost, base+bridge.PathRegister(), bytes.NewReader(body))
		proof.Apply(req.Header)
		return doHTTP(t, req)
	}
	if r := replay(); r.status != 200 {
		t.Fatalf("first use: %d %s", r.status, r.body)
	}
	// Status through the CLI.
	out.Reset()
	if rc := runCLI(context.Background(), []string{"status", "proc:vm", "--url", base, "--admin-token", adminToken}, &out, &errb, lookup); rc != 0 || !strings.Contains(out.String(), `"online":true`) {
		t.Fatalf("hub status: rc %d %s %s", rc, out.String(), errb.String())
	}

	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.wait(t)
	time.Sleep(10 * time.Millisecond) // the replayed proof predates the new process

	p2 := startHubProcess(t, env, "--listen", "127.0.0.1:0", "--api-key", apiKey, "--store", store)
	w.base = p2.url + "/v1"
	base = w.base
	wantCode(t, replay(), 401, bridge.CodeProofReplayed)
	w.mustRegister() // the identity and credential survived
	cur := w.incarnation
	w.incarnation = incA
	r, _ = w.register()
	wantCode(t, r, 409, bridge.CodeWorkerFenced)
	w.incarnation = cur

	// SIGTERM while a worker long-polls: the poll ends and the process exits 0.
	leaseDone := make(chan reply, 1)
	go func() { r, _ := w.lease(context.Background(), 30000); leaseDone <- r }()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p2.wait(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if lr := <-leaseDone; lr.status != 200 || time.Since(start) > 5*time.Second {
		t.Fatalf("lease during shutdown: %d %s after %v", lr.status, lr.body, time.Since(start))
	}
	if fi, err := os.Stat(store); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store mode %v %v", fi.Mode(), err)
	}
}

func TestCLIUsageAndConfig(t *testing.T) {
	var out, errb bytes.Buffer
	none := func(string) (string, bool) { return "", false }
	if rc := runCLI(context.Background(), []string{"bogus"}, &out, &errb, none); rc != 2 {
		t.Fatalf("unknown command: %d", rc)
	}
	if rc := runCLI(context.Background(), []string{"serve", "--listen", "0.0.0.0:0", "--store", filepath.Join(t.TempDir(), "x.db")}, &out, &errb, none); rc != 2 || !strings.Contains(errb.String(), "non-loopback") {
		t.Fatalf("non-loopback without TLS: %d %s", rc, errb.String())
	}
	errb.Reset()
	redis := func(k string) (string, bool) {
		return map[string]string{"CODELLM_HUB_STORE": "redis"}[k], k == "CODELLM_HUB_STORE"
	}
	if rc := runCLI(context.Background(), []string{"--store", filepath.Join(t.TempDir(), "x.db")}, &out, &errb, redis); rc != 2 || !strings.Contains(errb.String(), "redis") {
		t.Fatalf("redis store: %d %s", rc, errb.String())
	}
	if rc := runCLI(context.Background(), []string{"pair"}, &out, &errb, none); rc != 2 {
		t.Fatalf("pair without id: %d", rc)
	}
	// CODELLM_* wins over LIBRECHAT_CODE_*, which wins over CODEAPI_BRIDGE_*.
	env := map[string]string{"LIBRECHAT_CODE_HUB_AUTH_MODE": "static", "CODEAPI_BRIDGE_AUTH_MODE": "paired", "CODEAPI_BRIDGE_TOKEN": "tok"}
	look := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	get := func(name string) string { // serve's table under the one rule (internal/config)
		fs := newFlagSet("hub serve", io.Discard)
		(&config.Set{Settings: serveSettings()}).Register(fs)
		v, code := config.Parse(fs, nil, families, look)
		if code >= 0 {
			t.Fatalf("load: exit %d", code)
		}
		return v.String(name)
	}
	if v := get("auth-mode"); v != "static" {
		t.Fatal(v)
	}
	env["CODELLM_HUB_AUTH_MODE"] = "paired"
	if v := get("auth-mode"); v != "paired" {
		t.Fatal(v)
	}
	if v := get("worker-token"); v != "tok" {
		t.Fatal(v)
	}
}
