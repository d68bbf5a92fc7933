package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// goJudgeVersion is the peer measured beside codellm's service rows: go-judge, a sandboxed code runner
// that keeps pre-forked containers and reuses them across runs (codellm gives every block a fresh one).
// Pinned so that two runs of the harness compare against the same peer.
const (
	goJudgeModule  = "github.com/criyle/go-judge"
	goJudgeVersion = "v1.12.2"
)

// buildGoJudge compiles go-judge from the Go module proxy in a temporary module outside this repository
// (nothing of it is ever written into the checkout) and returns the binary's path inside dir. The module
// and build caches make every build after the first take seconds.
func buildGoJudge(dir string) (string, error) {
	if harness.goJudge != "" {
		return harness.goJudge, nil
	}
	mod := filepath.Join(dir, "gojudge-mod")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "go-judge")
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GOWORK=") && !strings.HasPrefix(e, "GOFLAGS=") {
			env = append(env, e)
		}
	}
	for _, args := range [][]string{
		{"mod", "init", "codellm-bench-gojudge"},
		{"get", goJudgeModule + "/cmd/go-judge@" + goJudgeVersion},
		{"build", "-o", bin, goJudgeModule + "/cmd/go-judge"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = mod, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, lastLine(out))
		}
	}
	return bin, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// startGoJudge runs go-judge with its defaults (pre-fork 1, parallelism = cores, default mounts and
// seccomp: the working directory holds no mount.yaml or seccomp.yaml) except that its REST listener is a
// free loopback port; gRPC, metrics and debug endpoints are off by default and stay off. It waits until
// /version answers.
func startGoJudge(bin, dir string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &server{base: "http://" + addr}
	s.cmd = exec.Command(bin, "-http-addr", addr, "-silent")
	s.cmd.Dir = dir
	s.cmd.Env = []string{"GIN_MODE=release"}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ES_") && !strings.HasPrefix(e, "GIN_MODE=") {
			s.cmd.Env = append(s.cmd.Env, e)
		}
	}
	s.cmd.Stdout, s.cmd.Stderr = &s.logs, &s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		select {
		case err := <-s.exited:
			s.exited <- err
			return nil, fmt.Errorf("go-judge exited during startup: %v: %s", err, lastLine([]byte(s.logs.String())))
		default:
		}
		resp, err := http.Get(s.base + "/version")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
			err = fmt.Errorf("/version: %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("go-judge not ready after 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// goJudgeBody is a /run request for one program file, with limits like codellm's defaults (512 MiB, 256
// tasks, 10 s of CPU) and the same 64 KiB output capture on both streams. The file is copied into the
// container's working directory, as codellm writes run<ext> into the block's workdir.
func goJudgeBody(argv []string, file, code string) string {
	q := func(s string) string { return strconv.Quote(s) }
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = q(a)
	}
	return `{"cmd":[{"args":[` + strings.Join(args, ",") + `],"env":["PATH=/usr/local/bin:/usr/bin:/bin"],` +
		`"files":[{"content":""},{"name":"stdout","max":65536},{"name":"stderr","max":65536}],` +
		`"cpuLimit":10000000000,"memoryLimit":536870912,"procLimit":256,` +
		`"copyIn":{` + q(file) + `:{"content":` + q(code) + `}}}]}`
}

// peer is a started go-judge, or why there is none.
type peer struct {
	s    *server
	skip string
}

// startPeer builds and starts go-judge and checks one bash run; any failure becomes a skip reason (it
// needs root for its cgroups and the module proxy or a warm module cache for its build).
func startPeer(dir string, logf func(string, ...any)) peer {
	bin, err := buildGoJudge(dir)
	if err != nil {
		return peer{skip: "go-judge " + goJudgeVersion + " could not be built: " + err.Error()}
	}
	s, err := startGoJudge(bin, dir)
	if err != nil {
		return peer{skip: "go-judge " + goJudgeVersion + " could not be started: " + err.Error()}
	}
	for _, p := range programs {
		if _, err := load(s.base, pathGoJudge, p.goJudgeBody(), stdoutWant, 1, 50*time.Millisecond); err != nil {
			s.stop()
			return peer{skip: fmt.Sprintf("go-judge %s does not run %s here: %v", goJudgeVersion, p.lang, err)}
		}
	}
	logf("service: go-judge %s on %s", goJudgeVersion, s.base)
	return peer{s: s}
}
