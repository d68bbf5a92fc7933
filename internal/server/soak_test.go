package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/sandbox/cgroup"
	"github.com/codellm/codellm/internal/testhelp"
	"github.com/codellm/codellm/internal/wire"
)

// TestSoak is the standing guard of issue 14: mixed requests against one server (chat that succeeds,
// failing blocks, timeouts, client disconnects, output floods, runner sessions and one-off executes),
// then no leaked process, descriptor, cgroup, workdir or session, and RSS within 2x of its warm start.
// CI runs a short form; CODELLM_SOAK_REQUESTS=10000 runs the long one on demand.
func TestSoak(t *testing.T) {
	n := testhelp.SoakRequests(t, 240)
	ts := startServer(t, options{ecfg: func(c *engine.Config) { c.Pipeline.MaxOutputBytes = 64 << 10 }})
	runnerRoot, err := os.MkdirTemp("", "codellm-soak-") // the sandbox user must traverse its parents
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(runnerRoot)
	os.Chmod(runnerRoot, 0o711)
	rn, err := runner.New(runner.Config{Programs: ts.srv.Engine().Config().Programs, Sandbox: ts.sb, Slots: ts.srv.Engine().Config().Slots,
		WorkRoot: runnerRoot, MaxRunTimeout: 10 * time.Second, MaxSessions: 8, MaxOutputBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(runnerRoot, "codellm-runner-*"))
	if len(dirs) != 1 {
		t.Fatalf("runner directories: %v", dirs)
	}
	runnerDir := dirs[0]
	rn.Register(ts.srv.Route)
	defer func() {
		rn.Close()
		if _, err := os.Stat(runnerDir); !os.IsNotExist(err) {
			t.Errorf("runner directory remains after Close: %v", err)
		}
	}()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	sk := &soaker{url: ts.URL, c: client}

	for i := range 12 { // warm-up: pools, caches, first-run costs
		sk.one(i)
	}
	client.CloseIdleConnections()
	warm := snapshot(t)
	sk.errs = nil

	work := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				sk.one(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	for i := range 8 {
		sk.do(http.MethodDelete, "/api/v2/sessions/soak-"+strconv.Itoa(i), nil, "", 0)
	}
	client.CloseIdleConnections()
	if len(sk.errs) > 0 {
		t.Fatalf("%d unexpected replies, first: %s", len(sk.errs), strings.Join(sk.errs[:min(5, len(sk.errs))], "\n"))
	}
	if rn.Sessions() != 0 {
		t.Errorf("%d runner sessions left", rn.Sessions())
	}
	var end usage
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		end = snapshot(t)
		if end.settled(warm) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%d requests; warm %+v; end %+v", n, warm, end)
	if !end.settled(warm) {
		t.Errorf("leak after %d requests: warm %+v, end %+v (processes, descriptors and cgroups must not grow; RSS at most 2x)", n, warm, end)
	}
	if entries, _ := os.ReadDir(filepath.Join(runnerDir, "sessions")); len(entries) > 0 {
		t.Errorf("%d session workspaces left", len(entries))
	}
}

type soaker struct {
	url  string
	c    *http.Client
	mu   sync.Mutex
	errs []string
}

// one sends request i of the mix and checks its reply.
func (s *soaker) one(i int) {
	const fence = "```"
	chatBody := func(code string, timeout int) []byte {
		req := chat(fence + "bash\n" + code + "\n" + fence + "\n")
		if timeout > 0 {
			req["metadata"] = map[string]any{"timeout_seconds": timeout}
		}
		b, _ := json.Marshal(req)
		return b
	}
	exec := func(src string) []byte {
		b, _ := json.Marshal(map[string]any{"language": "bash", "version": "*", "files": []any{map[string]any{"content": src}}})
		return b
	}
	switch i % 10 {
	case 0, 1, 2:
		s.do(http.MethodPost, "/v1/chat/completions", chatBody(`echo '{"answer":"ok `+strconv.Itoa(i)+`"}'`, 0), "", 200)
	case 3:
		s.do(http.MethodPost, "/v1/chat/completions", chatBody("echo boom >&2; exit 3", 0), "", 422)
	case 4:
		s.do(http.MethodPost, "/v1/chat/completions", chatBody("yes flood | head -c 400000", 0), "", 422) // output_limit
	case 5:
		if i%50 == 5 {
			s.do(http.MethodPost, "/v1/chat/completions", chatBody("sleep 30", 1), "", 422) // timeout
		} else {
			s.do(http.MethodPost, "/v1/chat/completions", chatBody("printf '{\"answer\":\"%s\"}' $(seq 1 500 | wc -l)", 0), "", 200)
		}
	case 6:
		s.disconnect(chatBody("sleep 30", 0))
	case 7, 8:
		s.do(http.MethodPost, "/api/v2/execute", exec("echo $((RANDOM)) >> log; wc -l < log"), "soak-"+strconv.Itoa(i%8), 200)
	case 9:
		s.do(http.MethodPost, "/api/v2/execute", exec("head -c 200000 /dev/zero | tr '\\0' x; echo"), "", 200) // stdout cap (OL)
	}
}

// do sends one request; want 0 accepts any status.
func (s *soaker) do(method, path string, body []byte, session string, want int) {
	req, _ := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if session != "" {
		req.Header.Set(wire.RuntimeSessionHeader, session)
	}
	resp, err := s.c.Do(req)
	if err != nil {
		s.fail("%s %s: %v", method, path, err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if want != 0 && resp.StatusCode != want {
		s.fail("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
}

// disconnect starts a long run and goes away while it runs.
func (s *soaker) disconnect(body []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := s.c.Do(req); err == nil {
		resp.Body.Close()
		s.fail("disconnect: the run answered %d before the client left", resp.StatusCode)
	}
}

func (s *soaker) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}

// usage is what must not leak.
type usage struct {
	Procs, FDs, Cgroups int
	RSSKiB              int64
}

func (u usage) settled(warm usage) bool {
	return u.Procs <= warm.Procs && u.FDs <= warm.FDs && u.Cgroups <= warm.Cgroups && u.RSSKiB <= 2*warm.RSSKiB
}

func snapshot(t *testing.T) usage {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var u usage
	fds, _ := os.ReadDir("/proc/self/fd")
	u.FDs = len(fds)
	u.Procs = descendants(os.Getpid())
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				u.RSSKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			}
		}
	}
	if h, err := cgroup.Detect(); err == nil {
		prefix := "codellm-" + strconv.Itoa(os.Getpid()) + "-"
		entries, _ := os.ReadDir(h.Info().Path)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
				u.Cgroups++
			}
		}
	}
	return u
}

// descendants counts the live processes below pid (a zombie, "Z", or a dead
// process its reaper is collecting, "X", is not live).
func descendants(pid int) int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[0] != "Z" && f[0] != "X" {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	n := 0
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				n++
				break
			}
		}
	}
	return n
}
