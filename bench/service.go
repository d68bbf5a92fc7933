package main

import (
	"bytes"
	"context"
	"encoding/json"
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

// LoadResult is one (system, endpoint, program, concurrency) row of the service measurement, summed over
// the run's interleaved rounds.
type LoadResult struct {
	System      string  `json:"system"` // codellm or go-judge
	Endpoint    string  `json:"endpoint"`
	Lang        string  `json:"lang"`
	Concurrency int     `json:"concurrency"`
	Requests    int     `json:"requests"`
	Seconds     float64 `json:"seconds"`
	RPS         float64 `json:"rps"`
	P50         float64 `json:"p50_ms"`
	P99         float64 `json:"p99_ms"`
	// ServerCPU is the CPU the server's whole process tree used per request (itself, its live
	// descendants and everything they reaped: the sandboxed programs, go-judge's container processes),
	// warm-up requests included in the count; CPUBoundRPS is cores·1000/ServerCPU, the rate the server
	// could sustain with every core to itself. Both hold up under other load, unlike req/s.
	ServerCPU   float64 `json:"server_cpu_ms_per_req"`
	CPUBoundRPS float64 `json:"cpu_bound_rps"`
	// MachineCPU is every core's busy time per request during the row and until the machine is quiet
	// again after it (settle; each row starts quiet): the server's tree plus what it
	// makes the kernel do elsewhere (network namespace teardown, cgroup and RCU work in kernel workers,
	// which the tree does not see) plus the load generator and anything else running. It is what bounds
	// throughput once the machine's cores are saturated; it is only as clean as the machine is quiet.
	MachineCPU float64 `json:"machine_cpu_ms_per_req"`
}

// PeerRatio compares one codellm endpoint with go-judge on the same program: codellm's value over
// go-judge's, so ≤ 1 is the goal for latency and CPU and ≥ 1 for throughput.
type PeerRatio struct {
	Endpoint   string  `json:"endpoint"`
	Lang       string  `json:"lang"`
	C1P50      float64 `json:"c1_p50_ratio"`
	C4RPS      float64 `json:"c4_rps_ratio"`
	C1CPU      float64 `json:"c1_cpu_ratio"`
	C4P50      float64 `json:"c4_p50_ratio"`
	CPUBoundC4 float64 `json:"c4_cpu_bound_rps_ratio"`
}

// ServiceResult is row 2: codellm serve and go-judge as real subprocesses under a closed-loop load
// generator, their rows interleaved round by round.
type ServiceResult struct {
	Rounds     int          `json:"rounds"`
	RowSeconds float64      `json:"row_seconds_per_round"`
	Peer       string       `json:"peer,omitempty"`         // "go-judge v1.12.2" when it was measured
	PeerSkip   string       `json:"peer_skipped,omitempty"` // why it was not
	Ratios     []PeerRatio  `json:"ratios_vs_peer,omitempty"`
	RSSMiB     float64      `json:"rss_mib"` // codellm serve's VmHWM after every row, the c=16 one included
	RSSConc    int          `json:"rss_concurrency"`
	PeerRSSMiB float64      `json:"peer_rss_mib,omitempty"`
	Rows       []LoadResult `json:"rows"`
}

// program is one of the measured programs, in each system's request shape.
type program struct {
	lang, label, ext string
	code             string
	argv             []string // go-judge's command line; the file is copied in as run<ext>
}

var programs = []program{
	{lang: "bash", label: "bash", ext: ".sh", code: `echo '{"answer":"x"}'`, argv: []string{"/bin/bash", "run.sh"}},
	{lang: "python", label: "python", ext: ".py", code: `print('{"answer":"x"}')`, argv: []string{"/usr/bin/python3", "run.py"}},
}

func (p program) executeBody() string {
	b, _ := json.Marshal(map[string]any{"language": p.lang, "version": "*", "files": []map[string]string{{"content": p.code}}})
	return string(b)
}

func (p program) chatBody() string {
	msg := "```" + p.label + "\n" + p.code + "\n```"
	b, _ := json.Marshal(map[string]any{"model": "codellm", "messages": []map[string]string{{"role": "user", "content": msg}}})
	return string(b)
}

func (p program) goJudgeBody() string { return goJudgeBody(p.argv, "run"+p.ext, p.code) }

const (
	// The finish tool call carries the block's answer; its presence proves the block ran.
	chatWant = `{\"answer\":\"x\"}`
	// Both /api/v2/execute and go-judge's /run answer the captured stdout as a JSON string.
	stdoutWant  = `"stdout":"{\"answer\":\"x\"}\n"`
	pathChat    = "/v1/chat/completions"
	pathExecute = "/api/v2/execute"
	pathGoJudge = "/run"
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
func buildCodellm(dir string) (string, error) { return buildCodellmTags(dir, "codellm", "") }

// buildCodellmTags is buildCodellm with build tags (bench's trace row builds `-tags codellm_trace`), into
// dir/name.
func buildCodellmTags(dir, name, tags string) (string, error) {
	if bin := harness.prebuilt(tags); bin != "" {
		return bin, nil
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the codellm module: run the harness from the repository (go run ./bench)")
	}
	bin := filepath.Join(dir, name)
	// Built like the Makefile builds the release binary: static, so the sandbox helper (this same binary,
	// re-executed per block) pays no dynamic loader.
	cmd := exec.Command("go", "build", "-trimpath", "-tags", tags, "-o", bin, "./cmd/codellm")
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
func startServer(bin, dir string) (*server, error) { return startServerEnv(bin, dir, nil) }

// serverDir makes a temporary directory for a server's binary and work root, traversable by the
// sandbox's unprivileged user (the runner API refuses a work root it cannot reach). The caller removes it.
func serverDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// startServerEnv is startServer with extra environment variables (bench's trace row: CODELLM_TRACE_FILE).
func startServerEnv(bin, dir string, env []string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	s := &server{base: "http://127.0.0.1:" + strconv.Itoa(port)}
	s.cmd = exec.Command(bin, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--work-dir", work, "--log-level", "warn",
		"--sandbox", harness.sandbox)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CODELLM_") {
			s.cmd.Env = append(s.cmd.Env, e)
		}
	}
	s.cmd.Env = append(s.cmd.Env, env...)
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

// treeCPU is the CPU time of pid and every live descendant, each with what it has reaped (/proc/PID/stat
// utime+stime+cutime+cstime, clock ticks of 1/100 s, the fixed USER_HZ of Linux). A descendant that
// exits between two readings moves its time into its reaper's cutime, which is in the tree too, so the
// growth between two readings is the work of the whole tree in between.
func treeCPU(pid int) (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	kids := map[int][]int{}
	cpu := map[int]time.Duration{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, c, err := procStat(p)
		if err != nil {
			continue // exited meanwhile
		}
		kids[ppid] = append(kids[ppid], p)
		cpu[p] = c
	}
	if _, ok := cpu[pid]; !ok {
		return 0, fmt.Errorf("process %d is gone", pid)
	}
	var sum time.Duration
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], kids[p]...)
		sum += cpu[p]
	}
	return sum, nil
}

// procStat reads the parent pid and the CPU time (own and reaped children's) of pid.
func procStat(pid int) (ppid int, cpu time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may contain spaces; the fields after its closing parenthesis do not.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc/PID/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 { // f[0] is field 3; ppid is field 4, utime..cstime are fields 14..17
		return 0, 0, errors.New("short /proc/PID/stat")
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, err
	}
	var ticks int64
	for _, x := range f[11:15] {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		ticks += v
	}
	return ppid, time.Duration(ticks) * 10 * time.Millisecond, nil
}

// load runs one warm-up and one measured phase (see loadPhases) and summarises them.
func load(base, path, body, want string, conc int, d time.Duration) (*LoadResult, error) {
	all, el, _, err := loadPhases(base, path, body, want, conc, d)
	if err != nil {
		return nil, err
	}
	return &LoadResult{Endpoint: path, Concurrency: conc, Requests: len(all), Seconds: round3(el.Seconds()),
		RPS: round3(float64(len(all)) / el.Seconds()), P50: ms(all.p50()), P99: ms(all.p99())}, nil
}

// loadPhases runs a closed loop of conc workers (one keep-alive connection each) posting body to path for
// d after a warm-up of d/5, checking every answer: a request that fails or answers something else stops
// the measurement with an error, because a fast wrong answer is not a result. It returns the measured
// phase's latencies and length and the number of warm-up requests.
func loadPhases(base, path, body, want string, conc int, d time.Duration) (sample, time.Duration, int, error) {
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
	warm, _, err := phase(d / 5)
	if err != nil {
		return nil, 0, 0, err
	}
	all, el, err := phase(d)
	return all, el, len(warm), err
}

// loadRow is one row of the service measurement and its samples accumulated over the rounds.
type loadRow struct {
	srv              *server
	system           string
	path, body, want string
	lang             string
	conc             int
	all              sample
	el, cpu, busy    time.Duration
	reqs             int // warm-up included: they used CPU too
}

// round measures the row once more for d and adds it up.
func (r *loadRow) round(d time.Duration) error {
	pid := r.srv.cmd.Process.Pid
	c0, err := treeCPU(pid)
	if err != nil {
		return err
	}
	b0, err := machineBusy()
	if err != nil {
		return err
	}
	all, el, warm, err := loadPhases(r.srv.base, r.path, r.body, r.want, r.conc, d)
	if err != nil {
		return fmt.Errorf("%s %s %s c%d: %w", r.system, r.path, r.lang, r.conc, err)
	}
	settle() // this row's trailing work is this row's (the rate counts only the load's own span)
	c1, err := treeCPU(pid)
	if err != nil {
		return err
	}
	b1, err := machineBusy()
	if err != nil {
		return err
	}
	r.all, r.el, r.cpu, r.reqs = append(r.all, all...), r.el+el, r.cpu+c1-c0, r.reqs+len(all)+warm
	r.busy += b1 - b0
	return nil
}

func (r *loadRow) result() LoadResult {
	lr := LoadResult{System: r.system, Endpoint: r.path, Lang: r.lang, Concurrency: r.conc, Requests: len(r.all),
		Seconds: round3(r.el.Seconds()), RPS: round3(float64(len(r.all)) / r.el.Seconds()),
		P50: ms(r.all.p50()), P99: ms(r.all.p99())}
	if r.reqs > 0 && r.cpu > 0 {
		lr.ServerCPU = round3(float64(r.cpu) / float64(time.Millisecond) / float64(r.reqs))
		lr.CPUBoundRPS = round3(float64(runtime.NumCPU()) * 1000 / lr.ServerCPU)
	}
	if r.reqs > 0 && r.busy > 0 {
		lr.MachineCPU = round3(float64(r.busy) / float64(time.Millisecond) / float64(r.reqs))
	}
	return lr
}

// rssConc is the concurrency of the memory row: server RSS is judged with this many requests in flight.
const rssConc = 16

// measureService builds and starts codellm serve and go-judge, and runs every row — go-judge /run and
// codellm's /api/v2/execute and chat, for bash and python, at concurrency 1 and 4 — in rounds, each round
// visiting every row once in the same order, so that a burst of other load on the machine hits both
// systems alike. Last comes one round of /api/v2/execute at concurrency 16, after which the server's peak
// RSS is read.
func measureService(rounds int, d time.Duration, logf func(string, ...any)) (*ServiceResult, error) {
	sv, err := startServers("service", logf)
	if err != nil {
		return nil, err
	}
	defer sv.stop()
	s, pr := sv.s, sv.peer
	res := &ServiceResult{Rounds: rounds, RowSeconds: d.Seconds(), RSSConc: rssConc, Peer: sv.peerName(), PeerSkip: pr.skip}
	rows := serviceRows(s, pr.s)
	// What came before (the other phases, the servers' start) is no row's; after that every row
	// settles at its end (loadRow.round), so the next one starts quiet.
	settle()
	for i := range rounds {
		for _, r := range rows {
			if err := r.round(d); err != nil {
				return nil, fmt.Errorf("service: %w\nserver log:\n%s", err, r.srv.logs.String())
			}
		}
		logf("service: round %d/%d done", i+1, rounds)
	}
	big := &loadRow{srv: s, system: "codellm", path: pathExecute, body: programs[0].executeBody(), want: stdoutWant, lang: "bash", conc: rssConc}
	if err := big.round(d); err != nil {
		return nil, fmt.Errorf("service: %w\nserver log:\n%s", err, s.logs.String())
	}
	for _, r := range append(rows, big) {
		lr := r.result()
		logf("service: %s %s %s c%d: %.0f req/s p50 %.2f ms p99 %.2f ms, %.2f CPU ms/req", lr.System, lr.Endpoint, lr.Lang,
			lr.Concurrency, lr.RPS, lr.P50, lr.P99, lr.ServerCPU)
		res.Rows = append(res.Rows, lr)
	}
	if res.RSSMiB, err = s.peakRSS(); err != nil {
		return nil, err
	}
	if pr.s != nil {
		res.PeerRSSMiB, _ = pr.s.peakRSS()
	}
	res.Ratios = peerRatios(res.Rows)
	return res, nil
}

// servers are a built and started codellm serve and, when it builds and runs, go-judge, in a temporary
// directory of their own.
type servers struct {
	dir  string
	s    *server
	peer peer
}

// startServers builds and starts both (row names the log lines).
func startServers(row string, logf func(string, ...any)) (*servers, error) {
	dir, err := serverDir("codellm-bench-" + row + "-")
	if err != nil {
		return nil, err
	}
	sv := &servers{dir: dir}
	bin, err := buildCodellm(dir)
	if err == nil {
		sv.s, err = startServer(bin, dir)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if sv.peer = startPeer(dir, logf); sv.peer.s == nil {
		logf("%s: %s; measuring codellm alone", row, sv.peer.skip)
	}
	return sv, nil
}

// peerName is the peer measured, "" when there is none.
func (sv *servers) peerName() string {
	if sv.peer.s == nil {
		return ""
	}
	return "go-judge " + goJudgeVersion
}

func (sv *servers) stop() {
	if sv.peer.s != nil {
		sv.peer.s.stop()
	}
	sv.s.stop()
	os.RemoveAll(sv.dir)
}

// serviceRows lists the rows of one round: per concurrency and program, go-judge (when running) next to
// codellm's two endpoints.
func serviceRows(s, gj *server) []*loadRow {
	var rows []*loadRow
	for _, conc := range []int{1, 4} {
		for _, p := range programs {
			if gj != nil {
				rows = append(rows, &loadRow{srv: gj, system: "go-judge", path: pathGoJudge, body: p.goJudgeBody(), want: stdoutWant, lang: p.lang, conc: conc})
			}
			rows = append(rows,
				&loadRow{srv: s, system: "codellm", path: pathExecute, body: p.executeBody(), want: stdoutWant, lang: p.lang, conc: conc},
				&loadRow{srv: s, system: "codellm", path: pathChat, body: p.chatBody(), want: chatWant, lang: p.lang, conc: conc})
		}
	}
	return rows
}

// peerRatios divides every codellm row by the go-judge row of the same program and concurrency.
func peerRatios(rows []LoadResult) []PeerRatio {
	find := func(system, path, lang string, conc int) *LoadResult {
		for i := range rows {
			if r := &rows[i]; r.System == system && r.Endpoint == path && r.Lang == lang && r.Concurrency == conc {
				return r
			}
		}
		return nil
	}
	var out []PeerRatio
	for _, path := range []string{pathExecute, pathChat} {
		for _, p := range programs {
			c1, c4 := find("codellm", path, p.lang, 1), find("codellm", path, p.lang, 4)
			g1, g4 := find("go-judge", pathGoJudge, p.lang, 1), find("go-judge", pathGoJudge, p.lang, 4)
			if c1 == nil || c4 == nil || g1 == nil || g4 == nil {
				continue
			}
			out = append(out, PeerRatio{Endpoint: path, Lang: p.lang, C1P50: ratio(c1.P50, g1.P50), C4RPS: ratio(c4.RPS, g4.RPS),
				C1CPU: ratio(c1.ServerCPU, g1.ServerCPU), C4P50: ratio(c4.P50, g4.P50), CPUBoundC4: ratio(c4.CPUBoundRPS, g4.CPUBoundRPS)})
		}
	}
	return out
}
