package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LoadResult is one (endpoint, concurrency) row of the service measurement.
type LoadResult struct {
	Endpoint    string  `json:"endpoint"`
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Seconds     float64 `json:"seconds"`
	RPS         float64 `json:"rps"`
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	// ServerCPU is the CPU the server and the sandboxes it reaped used per request (from
	// /proc/PID/stat utime+stime+cutime+cstime); CPUBoundRPS is cores·1000/ServerCPU, the rate the server
	// could sustain if it had every core to itself. Both hold up under other load, unlike req/s.
	ServerCPU   float64 `json:"server_cpu_ms_per_req"`
	CPUBoundRPS float64 `json:"cpu_bound_rps"`
}

// ServiceResult is row 2: codellm serve as a real subprocess under a closed-loop load generator.
type ServiceResult struct {
	C1P50     float64      `json:"c1_p50_ms"`
	C1P99     float64      `json:"c1_p99_ms"`
	C4RPS     float64      `json:"c4_rps"`
	C4P50     float64      `json:"c4_p50_ms"`
	C4P99     float64      `json:"c4_p99_ms"`
	RSSMiB    float64      `json:"rss_mib"`
	Runner    bool         `json:"runner_measured"`
	RunnerC1  float64      `json:"runner_c1_p50_ms,omitempty"`
	RunnerRPS float64      `json:"runner_c4_rps,omitempty"`
	Rows      []LoadResult `json:"rows"`
}

const (
	chatBody = "{\"model\":\"codellm\",\"messages\":[{\"role\":\"user\",\"content\":" +
		"\"```bash\\necho '{\\\"answer\\\":\\\"x\\\"}'\\n```\"}]}"
	// The finish tool call carries the block's answer; its presence proves the block ran.
	chatWant    = `{\"answer\":\"x\"}`
	runnerBody  = `{"language":"bash","version":"*","files":[{"content":"echo '{\"answer\":\"x\"}'"}]}`
	runnerWant  = `"stdout":"{\"answer\":\"x\"}\n"`
	pathChat    = "/v1/chat/completions"
	pathExecute = "/api/v2/execute"
)

// server is a running `codellm serve` subprocess.
type server struct {
	cmd    *exec.Cmd
	base   string
	logs   syncBuffer
	exited chan error
}

// syncBuffer collects the server's output; the exec package writes it from its own goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// buildCodellm compiles ./cmd/codellm of the module the harness belongs to into dir: the server measured
// is always the code of this checkout, never an installed binary.
func buildCodellm(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the codellm module: run the harness from the repository (go run ./bench)")
	}
	bin := filepath.Join(dir, "codellm")
	// Built like the Makefile builds the release binary: static, so the sandbox helper (this same binary,
	// re-executed per block) pays no dynamic loader.
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/codellm")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/codellm: %v\n%s", err, out)
	}
	return bin, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startServer runs `codellm serve` on a free loopback port and waits until /readyz says the startup
// self-check passed. The environment is the harness's minus CODELLM_*, so a developer's own settings
// cannot change what is measured.
func startServer(bin, dir string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	s := &server{base: "http://127.0.0.1:" + strconv.Itoa(port)}
	s.cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--work-dir", work, "--log-level", "warn")
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CODELLM_") {
			s.cmd.Env = append(s.cmd.Env, e)
		}
	}
	s.cmd.Stdout, s.cmd.Stderr = &s.logs, &s.logs
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-s.exited:
			s.exited <- err
			return nil, fmt.Errorf("codellm serve exited during startup: %v\n%s", err, s.logs.String())
		default:
		}
		resp, err := http.Get(s.base + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
			err = fmt.Errorf("readyz %d %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("codellm serve not ready after 30s: %v\n%s", err, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop asks the server to shut down and kills it if it has not within 10 s.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-s.exited:
		s.exited <- err
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		s.exited <- <-s.exited
	}
}

// peakRSS is the server's high-water resident set (VmHWM) in MiB. The sandbox helpers are separate
// processes and not part of it: this is the memory the service itself holds.
func (s *server) peakRSS() (float64, error) { return peakRSS(s.cmd.Process.Pid) }

func peakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, err
			}
			return round3(float64(kb) / 1024), nil
		}
	}
	return 0, errors.New("no VmHWM in /proc/PID/status")
}

// load runs a closed loop of conc workers posting body to path for d (after a warm-up of d/5), checking
// every answer: a request that fails or answers something else stops the measurement with an error,
// because a fast wrong answer is not a result.
func (s *server) load(path, body, want string, conc int, d time.Duration) (*LoadResult, error) {
	c0, err := procCPU(s.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	lr, err := load(s.base, path, body, want, conc, d)
	if err != nil {
		return nil, err
	}
	c1, err := procCPU(s.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	// load counts only the measured phase's requests; the warm-up's (d/5 of the time) also used CPU.
	all := float64(lr.Requests) * 1.2
	if all > 0 && c1 > c0 {
		lr.ServerCPU = round3(float64(c1-c0) / float64(time.Millisecond) / all)
		lr.CPUBoundRPS = round3(float64(runtime.NumCPU()) * 1000 / lr.ServerCPU)
	}
	return lr, nil
}

// procCPU is the CPU time of pid and its reaped children from /proc/PID/stat (clock ticks of 1/100 s,
// the fixed USER_HZ of Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; the fields after its closing parenthesis do not.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 { // f[0] is field 3; utime..cstime are fields 14..17
		return 0, errors.New("short /proc/PID/stat")
	}
	var ticks int64
	for _, x := range f[11:15] {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

func load(base, path, body, want string, conc int, d time.Duration) (*LoadResult, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, DisableCompression: true}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	one := func() (time.Duration, error) {
		t0 := time.Now()
		resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		dt := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(want)) {
			return 0, fmt.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
		return dt, nil
	}
	phase := func(d time.Duration) (sample, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var (
			mu   sync.Mutex
			all  sample
			ferr error
			wg   sync.WaitGroup
		)
		t0 := time.Now()
		for range conc {
			wg.Go(func() {
				var mine sample
				for ctx.Err() == nil {
					dt, err := one()
					if err != nil {
						mu.Lock()
						ferr = errors.Join(ferr, err)
						mu.Unlock()
						cancel()
						return
					}
					mine = append(mine, dt)
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		return all, time.Since(t0), ferr
	}
	if _, _, err := phase(d / 5); err != nil {
		return nil, err
	}
	all, el, err := phase(d)
	if err != nil {
		return nil, err
	}
	return &LoadResult{Endpoint: path, Concurrency: conc, Requests: len(all), Seconds: round3(el.Seconds()),
		RPS: round3(float64(len(all)) / el.Seconds()), P50: ms(all.p50()), P99: ms(all.p99())}, nil
}

// measureService builds and starts codellm serve, loads both endpoints at concurrency 1 and 4, and reads
// the server's peak RSS at the end.
func measureService(d time.Duration, logf func(string, ...any)) (*ServiceResult, error) {
	dir, err := os.MkdirTemp("", "codellm-bench-serve-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The runner API refuses a work root the sandbox's unprivileged user cannot traverse.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	bin, err := buildCodellm(dir)
	if err != nil {
		return nil, err
	}
	s, err := startServer(bin, dir)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	res := &ServiceResult{}
	// The runner API is mounted on the main listener; probe it once so an older build without it
	// still gets the chat rows.
	if _, err := s.load(pathExecute, runnerBody, runnerWant, 1, 50*time.Millisecond); err == nil {
		res.Runner = true
	} else {
		logf("service: %s not measured: %v", pathExecute, err)
	}
	type row struct {
		path, body, want string
		conc             int
	}
	rows := []row{{pathChat, chatBody, chatWant, 1}, {pathChat, chatBody, chatWant, 4}}
	if res.Runner {
		rows = append(rows, row{pathExecute, runnerBody, runnerWant, 1}, row{pathExecute, runnerBody, runnerWant, 4})
	}
	for _, r := range rows {
		lr, err := s.load(r.path, r.body, r.want, r.conc, d)
		if err != nil {
			return nil, fmt.Errorf("service %s c%d: %w\nserver log:\n%s", r.path, r.conc, err, s.logs.String())
		}
		logf("service: %s c%d: %.0f req/s p50 %.2f ms p99 %.2f ms", r.path, r.conc, lr.RPS, lr.P50, lr.P99)
		res.Rows = append(res.Rows, *lr)
		switch {
		case r.path == pathChat && r.conc == 1:
			res.C1P50, res.C1P99 = lr.P50, lr.P99
		case r.path == pathChat && r.conc == 4:
			res.C4RPS, res.C4P50, res.C4P99 = lr.RPS, lr.P50, lr.P99
		case r.conc == 1:
			res.RunnerC1 = lr.P50
		default:
			res.RunnerRPS = lr.RPS
		}
	}
	if res.RSSMiB, err = s.peakRSS(); err != nil {
		return nil, err
	}
	return res, nil
}
