package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/testhelp"
)

// The docker supervisor tests drive a real container engine: docker if its daemon answers, else podman.
// They are skipped (with the reason) only when neither exists; CI installs podman (.ci/run), so they run
// there.

var (
	engineOnce sync.Once
	engineCLI  string
	engineWhy  string
	imageOnce  sync.Once
	imageRef   string
	imageErr   error
)

// containerEngine returns a working docker-compatible CLI. For podman it points CONTAINERS_CONF (when
// unset) at a file selecting runc — crun refuses hybrid cgroup layouts — and ulimits within the host's
// hard limits (runc cannot raise them without CAP_SYS_RESOURCE).
func containerEngine(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("container engine tests skipped in -short mode")
	}
	engineOnce.Do(func() {
		testhelp.UsePodmanRunc()
		for _, cli := range []string{"docker", "podman"} {
			if _, err := exec.LookPath(cli); err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, cli, "info").CombinedOutput()
			cancel()
			if err == nil {
				engineCLI = cli
				return
			}
			engineWhy += fmt.Sprintf("%s info: %v %s; ", cli, err, bytes.TrimSpace(out[:min(len(out), 200)]))
		}
	})
	if engineCLI == "" {
		t.Skipf("no container engine (docker or podman) works here: %s", engineWhy)
	}
	return engineCLI
}

// runtimeImage builds the runtime image once per test binary from this host (deploy/container/rootfs.sh
// and `<cli> import`), reusing an existing image whose content hash matches.
func runtimeImage(t *testing.T) (cli, ref string) {
	t.Helper()
	cli = containerEngine(t)
	bin := codellmBinary(t) // the cross-process tests' build: rootfs.sh copies its libraries if it has any
	imageOnce.Do(func() { imageRef, imageErr = buildRuntimeImage(cli, bin) })
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return cli, imageRef
}

func buildRuntimeImage(cli, bin string) (string, error) {
	dir, err := os.MkdirTemp("", "codellm-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	script, err := os.ReadFile("../../deploy/container/rootfs.sh")
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(append(b, script...))
	hash := hex.EncodeToString(sum[:8])
	ref := "localhost/codellm-runtime-test:" + hash
	if exec.Command(cli, "image", "inspect", ref).Run() == nil {
		return ref, nil
	}
	tar := filepath.Join(dir, "rootfs.tar")
	if out, err := exec.Command("bash", "../../deploy/container/rootfs.sh", tar, bin).CombinedOutput(); err != nil {
		return "", fmt.Errorf("rootfs.sh: %v\n%s", err, out)
	}
	imp := exec.Command(cli, "import", "--change", `ENTRYPOINT ["/usr/local/bin/codellm"]`, "--change", `CMD ["serve"]`,
		"--change", "USER 10001:10001", "--change", "WORKDIR /var/lib/codellm",
		"--change", "ENV CODELLM_LISTEN=127.0.0.1:2000", "--change", "ENV CODELLM_WORK_DIR=/var/lib/codellm/work", tar, ref)
	if out, err := imp.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s import: %v\n%s", cli, err, out)
	}
	// Older test images (other builds) are dropped so they do not pile up; one in use stays.
	if out, err := exec.Command(cli, "images", "--format", "{{.Repository}}:{{.Tag}}", "localhost/codellm-runtime-test").Output(); err == nil {
		for _, old := range strings.Fields(string(out)) {
			if old != ref {
				_ = exec.Command(cli, "rmi", old).Run()
			}
		}
	}
	return ref, nil
}

func newTestDocker(t *testing.T, env ...string) *Docker {
	t.Helper()
	return newTestDockerWith(t, func(*DockerConfig) {}, env...)
}

// newTestDockerWith is newTestDocker with the configuration changed by mod (limits, sessions, owner); it
// is closed at the test's end.
func newTestDockerWith(t *testing.T, mod func(*DockerConfig), env ...string) *Docker {
	t.Helper()
	cli, ref := runtimeImage(t)
	cfg := DockerConfig{CLI: cli, Image: ref, Env: append([]string{"CODELLM_SANDBOX=besteffort"}, env...), Memory: 512 << 20, Pids: 256}
	mod(&cfg)
	d, err := NewDocker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

func bashCall(session, code string) RunnerCall {
	b, _ := json.Marshal(map[string]any{"language": "bash", "version": "*", "files": []map[string]string{{"content": code}}})
	return RunnerCall{SessionID: session, AssignmentID: "a" + strings.ReplaceAll(session, "-", ""), Body: b}
}

func stdoutOf(t *testing.T, d *Docker, call RunnerCall) string {
	t.Helper()
	o, err := d.Execute(context.Background(), call)
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	run, _ := o.Get("run")
	ro, _ := run.(*bridge.Object)
	if ro == nil {
		t.Fatalf("reply without run: %v", o)
	}
	s, _ := ro.Get("stdout")
	str, _ := s.(string)
	return str
}

func containerState(t *testing.T, d *Docker, sid string) string {
	out, err := d.cli(context.Background(), nil, "container", "inspect", "--format", "{{.Id}} {{.State.Running}}", ContainerName(sid))
	if err != nil {
		if isMissing(err) {
			return "missing"
		}
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func TestDockerSupervisor(t *testing.T) {
	d := newTestDocker(t)
	sid := fmt.Sprintf("docker-test-%d", time.Now().UnixNano())
	t.Cleanup(func() { _ = d.Reset(context.Background(), sid) })

	// Stateless: an assignment-<id> container that is gone afterwards.
	call := bashCall("", "echo stateless")
	call.AssignmentID = "st" + sid[len("docker-test-"):]
	if got := stdoutOf(t, d, call); got != "stateless\n" {
		t.Fatalf("stateless stdout %q", got)
	}
	if st := containerState(t, d, "assignment-"+call.AssignmentID); st != "missing" {
		t.Fatalf("stateless container left behind: %s", st)
	}

	// A session: created once, labelled, reused.
	if got := stdoutOf(t, d, bashCall(sid, "echo one")); got != "one\n" {
		t.Fatalf("session stdout %q", got)
	}
	first := containerState(t, d, sid)
	out, err := d.cli(context.Background(), nil, "container", "inspect", "--format", `{{index .Config.Labels "io.codellm.runtime-profile"}} {{index .Config.Labels "io.codellm.runtime-hash"}}`, ContainerName(sid))
	if err != nil || strings.TrimSpace(string(out)) != d.Profile()+" "+sessionHash(sid) {
		t.Fatalf("labels %q (%v), want profile %s and hash %s", out, err, d.Profile(), sessionHash(sid))
	}
	if got := stdoutOf(t, d, bashCall(sid, "echo two")); got != "two\n" || containerState(t, d, sid) != first {
		t.Fatalf("second call %q did not reuse %s (now %s)", got, first, containerState(t, d, sid))
	}

	// Stopped: docker restarts it.
	if _, err := d.cli(context.Background(), nil, "stop", "--time", "1", ContainerName(sid)); err != nil {
		t.Fatal(err)
	}
	if got := stdoutOf(t, d, bashCall(sid, "echo restarted")); got != "restarted\n" {
		t.Fatalf("after stop: %q", got)
	}

	// Another profile: the container is discarded and the assignment fails as state loss (never known-clean).
	d2 := newTestDocker(t, "CODELLM_TEST_PROFILE=2")
	_, err = d2.Execute(context.Background(), bashCall(sid, "echo lost"))
	var re *RunError
	if !errors.As(err, &re) || re.KnownClean || !strings.Contains(re.Message, "state lost") {
		t.Fatalf("profile change: %v", err)
	}
	if st := containerState(t, d, sid); st != "missing" {
		t.Fatalf("container of the old profile kept: %s", st)
	}
	if got := stdoutOf(t, d2, bashCall(sid, "echo fresh")); got != "fresh\n" {
		t.Fatalf("new profile: %q", got)
	}

	// A header with CR/LF is refused before anything runs.
	bad := bashCall(sid, "echo x")
	bad.Headers = [][2]string{{"X-A", "v\r\nX-Injected: 1"}}
	if _, err := d2.Execute(context.Background(), bad); !errors.As(err, &re) || !re.KnownClean {
		t.Fatalf("CR/LF header: %v", err)
	}

	// Reset removes the session's container.
	if err := d2.Reset(context.Background(), sid); err != nil {
		t.Fatal(err)
	}
	if st := containerState(t, d, sid); st != "missing" {
		t.Fatalf("after reset: %s", st)
	}
	if err := d2.Reset(context.Background(), sid); err != nil {
		t.Fatalf("reset of a missing container: %v", err)
	}
}

func TestDockerConfigErrors(t *testing.T) {
	for _, c := range []DockerConfig{
		{},
		{Image: "x", NSJail: true},
		{Image: "x", SeccompProfile: "relative.json"},
		{Image: "x", Env: []string{"NOEQUALS"}},
		{Image: "x"}, // no limits
	} {
		if _, err := NewDocker(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewDocker(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if ContainerName("s") != "codellm-"+sessionHash("s") || len(sessionHash("s")) != 24 {
		t.Fatal("container name shape")
	}
}

// `codellm hub` → `codellm worker --runtime-supervisor docker` → a runtime container built from this host:
// the exec runs in the session's container (its runner, reached with docker exec), the session's next exec
// reuses it, and `worker reset-workspace` removes it.
func TestE2EDockerSupervisor(t *testing.T) {
	cli, ref := runtimeImage(t)
	h := startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
	w := pairProc(t, h, "e2e:docker")
	wp := w.run(t, "--runtime-supervisor", "docker", "--runtime-image", ref, "--container-cli", cli,
		"--container-sandbox", "besteffort", "--runtimes", "bash")
	h.waitReady(t, "e2e:docker")
	rep := h.exec(t, "bash", `test -x /usr/local/bin/codellm && echo "in the image"`, nil)
	m := decodeExec(t, rep)
	sid, _ := m["session_id"].(string)
	if rep.status != 200 || m["stdout"] != "in the image\n" || sid == "" {
		t.Fatalf("exec through the docker supervisor: %d %s", rep.status, rep.body)
	}
	name := ContainerName(sid)
	inspect := func() string {
		out, _ := exec.Command(cli, "container", "inspect", "--format", "{{.Id}}", name).CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	first := inspect()
	if strings.Contains(first, "no such") || first == "" {
		t.Fatalf("no session container %s: %s", name, first)
	}
	b, _ := json.Marshal(map[string]string{"lang": "bash", "code": "echo again", "session_id": sid})
	rep = h.post(t, context.Background(), "/v1/exec", string(b), nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "again\n" || inspect() != first {
		t.Fatalf("second exec of the session: %d %s (container %s, was %s)", rep.status, rep.body, inspect(), first)
	}
	wp.kill()
	out, rc := runCmd(t, w.env, "worker", "reset-workspace", sid, "--worker-id", w.id, "--runtime-supervisor", "docker", "--container-cli", cli)
	if rc != 0 || !strings.Contains(out, "reset acknowledged for "+sid) {
		t.Fatalf("reset-workspace: %d %s", rc, out)
	}
	if got := inspect(); !strings.Contains(strings.ToLower(got), "no such") {
		t.Fatalf("container survived reset-workspace: %s", got)
	}
}

// The docker-nsjail variant: its capabilities, seccomp profile and /pkgs mount reach the container, and a
// stopped container is never restarted: it is removed and the assignment fails as state loss.
func TestDockerNSJailVariant(t *testing.T) {
	cli, ref := runtimeImage(t)
	dir := t.TempDir()
	prof := filepath.Join(dir, "seccomp.json")
	if err := os.WriteFile(prof, []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pkgs := filepath.Join(dir, "pkgs")
	if err := os.MkdirAll(pkgs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkgs, "marker"), []byte("pkg"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := NewDocker(context.Background(), DockerConfig{CLI: cli, Image: ref, NSJail: true, SeccompProfile: prof,
		PackagesPath: pkgs, Env: []string{"CODELLM_SANDBOX=besteffort"}, Memory: 512 << 20, Pids: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Label() != "docker-nsjail" || !strings.Contains(strings.Join(d.args, " "), "--cap-add SYS_ADMIN --cap-add SYS_CHROOT") ||
		!strings.Contains(strings.Join(d.args, " "), "seccomp="+prof) || !strings.Contains(strings.Join(d.args, " "), "SANDBOX_USE_CGROUPV2=false") {
		t.Fatalf("nsjail run arguments: %q", d.args)
	}
	sid := fmt.Sprintf("nsjail-test-%d", time.Now().UnixNano())
	t.Cleanup(func() { _ = d.Reset(context.Background(), sid) })
	if got := stdoutOf(t, d, bashCall(sid, "echo nsjail")); got != "nsjail\n" {
		t.Fatalf("stdout %q", got)
	}
	out, err := d.cli(context.Background(), nil, "exec", ContainerName(sid), "cat", "/pkgs/marker")
	if err != nil || string(out) != "pkg" {
		t.Fatalf("/pkgs not mounted: %q %v", out, err)
	}
	if _, err := d.cli(context.Background(), nil, "stop", "--time", "1", ContainerName(sid)); err != nil {
		t.Fatal(err)
	}
	_, err = d.Execute(context.Background(), bashCall(sid, "echo should not run"))
	var re *RunError
	if !errors.As(err, &re) || re.KnownClean || !strings.Contains(re.Message, "had stopped") {
		t.Fatalf("stopped nsjail container: %v", err)
	}
	if st := containerState(t, d, sid); st != "missing" {
		t.Fatalf("stopped nsjail container kept: %s", st)
	}
}
