package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/bridge"
)

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// codellmBinary builds ./cmd/codellm once per test run.
func codellmBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "codellm-bin-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "codellm")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/codellm/codellm/cmd/codellm").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/codellm: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// hubProc is one `codellm hub` process.
type hubProc struct {
	cmd  *exec.Cmd
	root string // http://addr
	done chan struct{}
}

// startHub starts `codellm hub serve` on storeURL, given as --store or,
// with viaEnv, as CODELLM_HUB_STORE=redis and CODELLM_HUB_REDIS_URL.
func startHub(t *testing.T, storeURL string, viaEnv bool) *hubProc {
	t.Helper()
	args := []string{"hub", "serve", "--listen", "127.0.0.1:0", "--admin-token", adminToken, "--api-key", apiKey}
	env := append(os.Environ(), "HOME="+t.TempDir())
	if viaEnv {
		env = append(env, "CODELLM_HUB_STORE=redis", "CODELLM_HUB_REDIS_URL="+storeURL)
	} else {
		args = append(args, "--store", storeURL)
	}
	cmd := exec.Command(codellmBinary(t), args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &hubProc{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	timeout := time.After(15 * time.Second)
	for p.root == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("hub process exited before listening")
			}
			if _, addr, found := strings.Cut(l, "listening on "); found {
				p.root = strings.TrimSpace(addr)
			}
		case <-timeout:
			t.Fatal("hub process did not start")
		}
	}
	// Drain the rest so the process never blocks on a full pipe.
	go func() {
		for range lines {
		}
	}()
	return p
}

// kill SIGKILLs the process (also when stopped) and reaps it.
func (p *hubProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// storeDB returns the shared server's URL on database db, emptied first, so
// processes (which use the default key prefix) do not meet other tests' keys.
func storeDB(t *testing.T, db int) string {
	t.Helper()
	u := needRedis(t)
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	opt.DB = db
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndex(u, "/")
	return fmt.Sprintf("%s/%d", u[:i], db)
}

// Two real hub processes on one Redis (E31). Killed during a lease: the
// worker's long poll on A hangs (A is stopped), work is queued through B,
// A is killed; the worker reconnects to B and gets that work exactly once.
// Killed while the worker holds an assignment: the worker leased and acked
// on B, B is killed, and its settlement lands on a fresh replica A'.
func TestHubProcessesFailover(t *testing.T) {
	storeURL := storeDB(t, 3)
	a, b := startHub(t, storeURL, false), startHub(t, storeURL, false)
	w := newSigWorker(t, "failover-vm", a.root+"/v1", b.root+"/v1")
	defer w.close()
	w.pair(b.root + "/v1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r := w.register(ctx); r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}

	type result struct {
		out string
		r   reply
	}
	submit := func(root, code string) <-chan result {
		ch := make(chan result, 1)
		go func() { out, r := execOn(ctx, root, code); ch <- result{out, r} }()
		return ch
	}
	expect := func(ch <-chan result, code string) {
		t.Helper()
		got := <-ch
		if got.r.status != 200 || got.out != "ran:"+code {
			t.Fatalf("exec %q: %d %s", code, got.r.status, got.r.body)
		}
	}
	// nothingMore checks no assignment is delivered a second time.
	nothingMore := func() {
		t.Helper()
		if r, as := w.lease(ctx, 300); r.status != 200 || as != nil {
			t.Fatalf("second delivery: %d %+v", r.status, as)
		}
	}

	// 1. Killed during a lease.
	leased := make(chan *bridge.Assignment, 1)
	go func() {
		r, as := w.lease(ctx, 20000) // on A; fails over to B when A dies
		if r.status != 200 {
			t.Errorf("lease: %d %s", r.status, r.body)
		}
		leased <- as
	}()
	time.Sleep(300 * time.Millisecond) // the poll is parked on A
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	res := submit(b.root, "print('during lease')")
	time.Sleep(300 * time.Millisecond) // queued in Redis; A cannot hand it out
	a.kill()
	as := <-leased
	if as == nil {
		t.Fatal("no assignment after failing over to B")
	}
	if w.base() != b.root+"/v1" {
		t.Fatalf("worker on %s, want B", w.base())
	}
	if r := w.ack(ctx, as); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	if r := w.settle(ctx, as); r.status != 200 {
		t.Fatalf("settle: %d %s", r.status, r.body)
	}
	expect(res, "print('during lease')")
	nothingMore()

	// 2. Killed while the worker holds an assignment.
	a2 := startHub(t, storeURL, true)
	w.mu.Lock()
	w.bases[0] = a2.root + "/v1"
	w.mu.Unlock()
	res = submit(a2.root, "print('held')")
	as2 := func() *bridge.Assignment {
		for ctx.Err() == nil {
			r, as := w.lease(ctx, 5000) // on B, woken by A2's change
			if r.status != 200 {
				t.Fatalf("lease: %d %s", r.status, r.body)
			}
			if as != nil {
				return as
			}
		}
		t.Fatal("no assignment")
		return nil
	}()
	if r := w.ack(ctx, as2); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	b.kill()
	if r := w.settle(ctx, as2); r.status != 200 {
		t.Fatalf("settle after failover: %d %s", r.status, r.body)
	}
	if w.base() != a2.root+"/v1" {
		t.Fatalf("worker on %s, want A'", w.base())
	}
	expect(res, "print('held')")
	// A resent settlement is idempotent, and nothing is delivered again.
	if r := w.settle(ctx, as2); r.status != 200 {
		t.Fatalf("resent settle: %d %s", r.status, r.body)
	}
	nothingMore()
}

// execSession posts /v1/exec with a session_id and headers; it returns the reply and its session_id.
func execSession(ctx context.Context, root, code, sid string, hdr map[string]string) (string, reply) {
	body := map[string]string{"lang": "py", "code": code}
	if sid != "" {
		body["session_id"] = sid
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, root+"/v1/exec", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	r := do(http.DefaultClient, req)
	var out struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal(r.body, &out)
	return out.SessionID, r
}

// Issue 36: a replica (a real `codellm hub` process) is killed with SIGKILL while a stateful worker runs
// a request of an existing session that it dispatched. The worker settles on the other replica, and that
// replica continues the session on the same worker at once: the settlement freed the worker and committed
// the session, and the session → worker record is in Redis. Before, the worker stayed locked until the
// deadline plus 30 s, the session stayed fenced (409), and the other replica did not know its worker.
func TestReplicaKilledMidRun(t *testing.T) {
	storeURL := storeDB(t, 4)
	a, b := startHub(t, storeURL, false), startHub(t, storeURL, false)
	w := newSigWorker(t, "kill-vm", b.root+"/v1")
	w.caps.StatefulWorkspace = true
	defer w.close()
	w.pair(b.root + "/v1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r := w.register(ctx); r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	next := func() *bridge.Assignment { t.Helper(); return w.next(ctx, true) }
	// A session created through A.
	type result struct {
		sid string
		r   reply
	}
	submit := func(root, code, sid string) <-chan result {
		ch := make(chan result, 1)
		go func() { s, r := execSession(ctx, root, code, sid, nil); ch <- result{s, r} }()
		return ch
	}
	res := submit(a.root, "x=1", "")
	as := next()
	w.ack(ctx, as)
	w.settle(ctx, as)
	got := <-res
	if got.r.status != 200 || got.sid == "" || as.RuntimeSessionID != got.sid {
		t.Fatalf("first run: %d %s", got.r.status, got.r.body)
	}
	sid := got.sid

	// A dispatches the session's next request and dies while the worker runs it.
	res = submit(a.root, "x+=1", sid)
	as = next()
	if r := w.ack(ctx, as); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	a.kill()
	if r := w.settle(ctx, as); r.status != 200 {
		t.Fatalf("settle on B: %d %s", r.status, r.body)
	}
	if got := <-res; got.r.status != -1 {
		t.Fatalf("the killed replica answered: %d %s", got.r.status, got.r.body)
	}

	// B continues the session on the worker, at once.
	start := time.Now()
	res = submit(b.root, "print(x)", sid)
	as = next()
	if as.RuntimeSessionID != sid {
		t.Fatalf("runtimeSessionId %q, want %q", as.RuntimeSessionID, sid)
	}
	w.ack(ctx, as)
	w.settle(ctx, as)
	if got := <-res; got.r.status != 200 || got.sid != sid {
		t.Fatalf("session on B: %d %s", got.r.status, got.r.body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the session continued only after %v", d)
	}
}
