//go:build linux

package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/testhelp"
)

// baseImage is the debootstrap base deploy/container/base.sh makes; kept between runs (it only changes
// with Debian's archive), rebuilt when missing.
const baseImage = "localhost/codellm-base:trixie"

// The Dockerfile builds where no registry is reachable — its stages' bases from deploy/container/base.sh
// (debootstrap), the Go toolchain and modules from the host — and the image runs under podman with the
// operator guide's flags (§4.2) in native mode: with a cgroup subtree delegated to the container's user it
// is ready and answers a chat request; without one it refuses (fail closed, /readyz 503 naming cgroup).
func TestImageBuiltOfflineServesNative(t *testing.T) {
	if testing.Short() {
		t.Skip("container image build skipped in -short mode")
	}
	for _, tool := range []string{"podman", "runc", "debootstrap", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the offline image build needs podman, runc and debootstrap", tool)
		}
	}
	if os.Getuid() != 0 {
		t.Skip("building the base with debootstrap and delegating a cgroup need root")
	}
	mounts := delegatedCgroup(t)
	testhelp.UsePodmanRunc()
	image := buildOffline(t)

	key := secretHex(t)
	withCgroup := runImage(t, image, key, mounts)
	if code, body := readyz(t, withCgroup); code != 200 || !strings.Contains(body, `"sandbox":"native"`) {
		t.Fatalf("/readyz with a delegated cgroup: %d %s", code, body)
	}
	req, err := os.ReadFile("../examples/request.json")
	if err != nil {
		t.Fatal(err)
	}
	code, body := httpPost(t, withCgroup+"/v1/chat/completions", key, req)
	var reply struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
	}
	if code != 200 || json.Unmarshal([]byte(body), &reply) != nil || len(reply.Choices) != 1 ||
		len(reply.Choices[0].Message.ToolCalls) != 2 || reply.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"path":"notes/hi.md","content":"hello"}` {
		t.Fatalf("chat in the container: %d %s", code, body)
	}

	without := runImage(t, image, key, nil)
	if code, body := readyz(t, without); code != 503 || !strings.Contains(body, "cgroup") {
		t.Fatalf("/readyz without a delegated cgroup: %d %s (want 503 naming cgroup)", code, body)
	}
	if code, body := httpPost(t, without+"/v1/chat/completions", key, req); code != 422 || !strings.Contains(body, "sandbox_unavailable") {
		t.Fatalf("chat without a delegated cgroup: %d %s (want 422 sandbox_unavailable)", code, body)
	}
}

// delegatedCgroup makes a cgroup subtree owned by the image's user (uid 10001) and returns the podman
// flags that mount it where the container looks for its cgroup (operator guide §4.2). On cgroup v1 that
// is one directory per controller, mounted over the controller's hierarchy.
func delegatedCgroup(t *testing.T) []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		t.Skip("cgroup v2 host: the delegated container is proven by the host matrix (issue 34), not here")
	}
	name := "codellm-image-test-" + secretHex(t)[:8]
	var flags []string
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		dir := filepath.Join("/sys/fs/cgroup", c, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Skipf("cannot create a %s cgroup here: %v", c, err)
		}
		t.Cleanup(func() { removeCgroup(t, dir) }) // after the containers: Cleanups run last-registered first
		if err := chownTree(dir, 10001); err != nil {
			t.Fatal(err)
		}
		flags = append(flags, "--mount", "type=bind,source="+dir+",target=/sys/fs/cgroup/"+c)
	}
	return flags
}

// removeCgroup removes dir and the cgroups codellm left below it (a killed server cannot remove its own).
func removeCgroup(t *testing.T, dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		// The container's last processes may still be exiting (EBUSY) just after podman rm returns.
		err := os.Remove(dirs[i])
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); err = os.Remove(dirs[i]) {
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("cgroup left behind: %v", err)
		}
	}
}

func chownTree(dir string, uid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
}

// buildOffline builds the Dockerfile's runtime target with no registry: the debootstrap base for both
// stages, the host's Go toolchain, module cache and build cache mounted, GOPROXY=off.
func buildOffline(t *testing.T) string {
	if exec.Command("podman", "image", "exists", baseImage).Run() != nil {
		if out, err := exec.Command("container/base.sh", baseImage).CombinedOutput(); err != nil {
			t.Fatalf("base.sh: %v\n%s", err, out)
		}
	}
	env := func(k string) string {
		out, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("go", "mod", "download").CombinedOutput(); err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	image := "localhost/codellm-image-test:" + secretHex(t)[:8]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "podman", "build", "--pull=never", "--format=docker", "--target=runtime",
		"--build-arg", "BASE_IMAGE="+baseImage, "--build-arg", "GO_IMAGE="+baseImage, "--build-arg", "GOPROXY=off",
		"--build-arg", "LIBRECHAT_LANGUAGES=0",
		"-v", env("GOROOT")+":/usr/local/go:ro", "-v", env("GOMODCACHE")+":/go/pkg/mod", "-v", env("GOCACHE")+":/root/.cache/go-build",
		"-t", image, "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("podman build: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", image).Run() })
	return image
}

// runImage starts the image as the guide says (§4.2), listening on a free loopback port, and returns its
// base URL once /healthz answers; the container is removed at the end of the test.
func runImage(t *testing.T, image, key string, extra []string) string {
	port := testhelp.FreePort(t)
	name := "codellm-image-test-" + secretHex(t)[:8]
	args := append([]string{"run", "-d", "--name", name, "-p", "127.0.0.1:" + port + ":8080", "-e", "CODELLM_API_KEY=" + key,
		"--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"--security-opt", "systempaths=unconfined", "--cgroupns=private"}, extra...)
	if out, err := exec.Command("podman", append(args, image)...).CombinedOutput(); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("podman", "rm", "-f", "-t", "30", name).Run() })
	base := "http://127.0.0.1:" + port
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if code, _ := httpGet(t, base+"/healthz"); code == 200 {
			return base
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("podman", "logs", name).CombinedOutput()
			t.Fatalf("the container did not serve within a minute:\n%s", logs)
		}
	}
}

// readyz is /readyz once the start-up self-check has finished (within a minute).
func readyz(t *testing.T, base string) (int, string) {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		code, body := httpGet(t, base+"/readyz")
		if !strings.Contains(body, "self-check has not finished") || time.Now().After(deadline) {
			return code, body
		}
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func httpPost(t *testing.T, url, key string, body []byte) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func secretHex(t *testing.T) string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
