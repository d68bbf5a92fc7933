package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/testhelp"
)

// TestSoakWithKills is the soak test's crash form (issue 35): the real binaries (serve, a hub and a
// worker) under a mix of requests (chats that answer and chats that sleep, runner session executes, hub
// execs), while `serve`, serve's spawner and the worker are SIGKILLed at random points and started again.
// Afterwards, once each has been started and stopped once more (their start-up sweeps): no program of a
// block left (frozen or not), no cgroup of any serve or worker that ever ran, nothing mounted and nothing
// left in their work directories, and no answer that came back was wrong (an answer is complete and says
// what its request asked, or the request failed). CI runs a short form; CODELLM_SOAK_REQUESTS=10000 runs
// the long one.
func TestSoakWithKills(t *testing.T) {
	n := testhelp.SoakRequests(t, 36)
	ks := newKillSoak(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill seed %d", seed)
	stop := make(chan struct{})
	killed := make(chan map[string]int, 1)
	go func() { killed <- ks.killer(rand.New(rand.NewPCG(seed, 1)), stop) }()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				ks.request(i)
			}
		}()
	}
	wg.Wait()
	close(stop)
	kills := <-killed
	ks.settle()
	t.Logf("%d requests: %d answered, %d failed; kills %v", n, ks.answered.Load(), ks.failed.Load(), kills)
	ks.check()
}

// killSoak is the soak's processes and what it saw.
type killSoak struct {
	t                   *testing.T
	marker              string // in every block's argv: sleep <marker>
	serveAddr, serveDir string
	hub                 *hubProc
	w                   *e2eWorker
	client              *http.Client

	mu     sync.Mutex // guards serve, worker, pids, wrong
	serve  *proc
	worker *proc
	pids   []int    // every serve and worker that ran
	wrong  []string // answers that said something else than asked

	answered, failed atomic.Int64
}

func newKillSoak(t *testing.T) *killSoak {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ks := &killSoak{t: t, marker: fmt.Sprintf("1.%d%06d", os.Getpid(), time.Now().UnixNano()%1e6),
		serveAddr: addr, serveDir: workRoot(t), client: &http.Client{Timeout: 30 * time.Second}}
	t.Cleanup(func() {
		testhelp.KillCmdline(t, "sleep\x00"+ks.marker)
		testhelp.KillCmdline(t, "sleep\x00600"+ks.marker[1:])
	})
	ks.hub = startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
	ks.w = pairProc(t, ks.hub, "soak")
	if err := errors.Join(ks.startServe(), ks.startWorker()); err != nil {
		t.Fatal(err)
	}
	ks.hub.waitReady(t, ks.w.id)
	return ks
}

// startServe starts serve on the soak's address and work dir and waits until it is ready.
func (ks *killSoak) startServe() error {
	p := startProc(ks.t, nil, "serve", "--listen", ks.serveAddr, "--work-dir", ks.serveDir, "--sandbox", sandboxFlag(ks.t),
		"--allowed-programs", "bash", "--runner-max-sessions", "8")
	ks.mu.Lock()
	ks.serve = p
	ks.pids = append(ks.pids, p.cmd.Process.Pid)
	ks.mu.Unlock()
	ready := func() bool {
		resp, err := http.Get("http://" + ks.serveAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	if !within(60*time.Second, ready) {
		return fmt.Errorf("serve not ready within 60 s: %s", p.out.String())
	}
	return nil
}

// within polls cond until it holds or d has passed (a hang bound), and reports whether it held.
func within(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// startWorker starts the worker and waits until its supervisor is built (its start-up sweep done). It
// does not wait for its registration: after a SIGKILL the hub keeps the dead incarnation's lock until the
// deadline of what it held plus 30 s, and the new incarnation retries until then.
func (ks *killSoak) startWorker() error {
	p := ks.w.run(ks.t)
	ks.mu.Lock()
	ks.worker = p
	ks.pids = append(ks.pids, p.cmd.Process.Pid)
	ks.mu.Unlock()
	if !within(60*time.Second, func() bool { return strings.Contains(p.out.String(), " running against ") }) {
		return fmt.Errorf("worker not started within 60 s: %s", p.out.String())
	}
	return nil
}

// killer SIGKILLs serve, its spawner or the worker every 0.5-2.5 s until stop, starting them again, and
// counts what it killed. A restart that fails is an error of the test, and ends the killing.
func (ks *killSoak) killer(r *rand.Rand, stop <-chan struct{}) map[string]int {
	kills := map[string]int{}
	for {
		select {
		case <-stop:
			return kills
		case <-time.After(500*time.Millisecond + time.Duration(r.IntN(2000))*time.Millisecond):
		}
		var err error
		serve, worker := ks.procs()
		switch r.IntN(4) {
		case 0:
			serve.kill()
			err = ks.startServe()
			kills["serve"]++
		case 1, 2:
			if pid := spawnerOf(ks.t, serve.cmd.Process.Pid); pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
				kills["spawner"]++
			}
		case 3:
			worker.kill()
			err = ks.startWorker()
			kills["worker"]++
		}
		if err != nil {
			ks.t.Errorf("restart after a kill: %v", err)
			<-stop
			return kills
		}
	}
}

// procs are the serve and worker processes running now.
func (ks *killSoak) procs() (serve, worker *proc) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.serve, ks.worker
}

// spawnerOf is the pid of serve's spawner, 0 when it has none now: serve's child whose argv says
// codellm-spawner and whose name (comm) says so too; the raw helpers it forks share that argv (they never
// exec) and are serve's children too (CLONE_PARENT), but name themselves codellm-raw or codellm-idle.
func spawnerOf(t *testing.T, serve int) int {
	for _, pid := range testhelp.CmdlinePIDs(t, "codellm-spawner") {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if err != nil || i < 0 || j < i || string(b[i+1:j]) != "codellm-spawner" {
			continue
		}
		if f := strings.Fields(string(b[j+1:])); len(f) > 1 && f[1] == strconv.Itoa(serve) {
			return pid
		}
	}
	return 0
}

// request sends request i of the mix; a failure (refused, reset, 5xx) is counted, a 200 must say what i
// asked for.
func (ks *killSoak) request(i int) {
	sleep := "sleep " + ks.marker
	var status int
	var got, want string
	switch i % 6 {
	case 5: // runs until its 2 s timeout: a kill meanwhile must not leave it sleeping for 10 minutes
		ks.chatTimeout("sleep 600"+ks.marker[1:], 2)
		ks.failed.Add(1)
		return
	case 0:
		status, got = ks.chat(fmt.Sprintf(`echo '{"answer":"ok %d"}'`, i))
		want = fmt.Sprintf("ok %d", i)
	case 1:
		status, got = ks.chat(fmt.Sprintf(`%s & %s; echo '{"answer":"slept %d"}'`, sleep, sleep, i))
		want = fmt.Sprintf("slept %d", i)
	case 2:
		status, got = ks.execute(fmt.Sprintf("%s; echo %d", sleep, i), "soak-"+strconv.Itoa(i%4))
		want = fmt.Sprintf("%d\n", i)
	case 3, 4:
		status, got = ks.hubExec(fmt.Sprintf("%s & echo %d", sleep, i))
		want = fmt.Sprintf("%d\n", i)
	}
	if status != 200 {
		ks.failed.Add(1)
		return
	}
	ks.answered.Add(1)
	if got != want {
		ks.mu.Lock()
		ks.wrong = append(ks.wrong, fmt.Sprintf("request %d answered %q, want %q", i, got, want))
		ks.mu.Unlock()
	}
}

// post sends body and decodes a 200 reply into out; it returns the status (0: no reply).
func (ks *killSoak) post(url string, body any, hdr map[string]string, out any) int {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := ks.client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && (err != nil || json.Unmarshal(raw, out) != nil) {
		return -1 // a 200 with a body cut short is a wrong answer, not a failure
	}
	if os.Getenv("CODELLM_SOAK_DEBUG") != "" && resp.StatusCode == 200 {
		ks.t.Logf("%s: %s", url, raw)
	}
	return resp.StatusCode
}

func (ks *killSoak) chat(script string) (int, string) {
	var r struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Arguments string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	st := ks.post("http://"+ks.serveAddr+"/v1/chat/completions", map[string]any{"model": "codellm",
		"messages": []map[string]string{{"role": "user", "content": "```bash\n" + script + "\n```"}}}, nil, &r)
	var args struct{ Answer string }
	if st == 200 && len(r.Choices) == 1 && len(r.Choices[0].Message.ToolCalls) == 1 {
		_ = json.Unmarshal([]byte(r.Choices[0].Message.ToolCalls[0].Function.Arguments), &args)
	}
	return okOrWrong(st), args.Answer
}

// chatTimeout runs script with a run timeout of seconds (it is expected to time out).
func (ks *killSoak) chatTimeout(script string, seconds int) {
	var r struct{}
	ks.post("http://"+ks.serveAddr+"/v1/chat/completions", map[string]any{"model": "codellm",
		"metadata": map[string]any{"timeout_seconds": seconds},
		"messages": []map[string]string{{"role": "user", "content": "```bash\n" + script + "\n```"}}}, nil, &r)
}

func (ks *killSoak) execute(code, session string) (int, string) {
	var r struct{ Run struct{ Stdout string } }
	st := ks.post("http://"+ks.serveAddr+"/api/v2/execute", map[string]any{"language": "bash", "version": "*",
		"files": []map[string]string{{"content": code}}}, map[string]string{"X-Runtime-Session-Id": session}, &r)
	return okOrWrong(st), r.Run.Stdout
}

func (ks *killSoak) hubExec(code string) (int, string) {
	var r struct{ Stdout string }
	st := ks.post(ks.hub.url+"/v1/exec", map[string]string{"lang": "bash", "code": code},
		map[string]string{"X-API-Key": apiKey, "X-Codellm-Timeout-Ms": "8000"}, &r)
	return okOrWrong(st), r.Stdout
}

// okOrWrong makes a cut 200 (-1) count as an answer, which then cannot match what was asked.
func okOrWrong(st int) int {
	if st == -1 {
		return 200
	}
	return st
}

// settle stops serve and the worker, starts each once more (their start-up sweeps collect what the
// killed ones left) and stops it again, as an operator's restart does.
func (ks *killSoak) settle() {
	for range 2 {
		s, w := ks.procs()
		s.stop()
		w.stop()
		if ks.t.Failed() {
			return
		}
		if err := errors.Join(ks.startServe(), ks.startWorker()); err != nil {
			ks.t.Fatal(err)
		}
	}
	ks.serve.stop()
	ks.worker.stop()
}

// check asserts that nothing of any killed process is left, and that no answer was wrong.
func (ks *killSoak) check() {
	t := ks.t
	for _, m := range []string{ks.marker, "600" + ks.marker[1:]} {
		if left := testhelp.WaitCmdlineGone(t, "sleep\x00"+m, 15*time.Second); len(left) > 0 {
			t.Errorf("%d programs of blocks (sleep %s) outlived the soak: %v", len(left), m, left)
		}
	}
	for _, pid := range ks.pids {
		if left := testhelp.CgroupsOf(t, pid); len(left) > 0 {
			t.Errorf("cgroups of codellm %d left (frozen or not): %q", pid, left)
		}
	}
	for _, dir := range []string{ks.serveDir, ks.w.work} {
		if m := testhelp.MountsUnder(t, dir); len(m) > 0 {
			t.Errorf("mounts left under %s: %q", dir, m)
		}
		var left []string
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			// fleetkit's module tree is one read-only directory per build, shared by every process (fleetkit.Materialise).
			if !strings.HasPrefix(e.Name(), "codellm-fleetkit-") {
				left = append(left, e.Name())
			}
		}
		if len(left) > 0 {
			t.Errorf("left in %s: %q", dir, left)
		}
	}
	if len(ks.wrong) > 0 {
		t.Errorf("%d wrong answers, first: %s", len(ks.wrong), strings.Join(ks.wrong[:min(5, len(ks.wrong))], "\n"))
	}
	if ks.answered.Load() == 0 {
		t.Errorf("no request was answered: the soak checked nothing")
	}
}
