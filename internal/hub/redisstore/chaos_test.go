package redisstore_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/redisstore"
)

// redisProc is a redis-server of one test, which it may stop, restart
// (with or without its data) and flush; the port stays the same.
type redisProc struct {
	t      *testing.T
	bin    string
	dir    string
	port   int
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
}

func startOwnRedis(t *testing.T, args ...string) *redisProc {
	t.Helper()
	needRedis(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	p := &redisProc{t: t, bin: bin, dir: t.TempDir(), port: port, args: args}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *redisProc) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", p.port) }

func (p *redisProc) client() *redis.Client {
	opt, _ := redis.ParseURL(p.url())
	return redis.NewClient(opt)
}

// start runs the server on its directory and waits until it answers.
func (p *redisProc) start() {
	p.t.Helper()
	args := append([]string{"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1", "--dir", p.dir}, p.args...)
	p.cmd = exec.Command(p.bin, args...)
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	cmd, exited := p.cmd, p.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	c := p.client()
	defer c.Close()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
	}
	p.t.Fatal("redis-server did not come up")
}

// stop shuts the server down cleanly (SIGTERM: an AOF is flushed).
func (p *redisProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

func (p *redisProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// wipe deletes the data directory's content (a restart then comes up empty).
func (p *redisProc) wipe() {
	ents, _ := os.ReadDir(p.dir)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(p.dir, e.Name()))
	}
}

// replicaAt is an in-process hub replica on url with the change feed.
func replicaAt(t *testing.T, url string) *replica {
	t.Helper()
	st, err := redisstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hub.Config{AdminToken: adminToken, ClientKeys: []hub.ClientKey{{Key: apiKey, TenantID: "default"}},
		PollInterval: 20 * time.Millisecond, ExecTimeout: 5 * time.Second, QueueTimeout: time.Second,
		RateLimits: hub.RateLimits{Off: true}} // one caller sends the whole load (the limits: limits_test.go)
	return serveReplica(t, st, cfg, true)
}

func getURL(url string) reply {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	return do(http.DefaultClient, req)
}

// chaosWorker is the worker side: it serves until the hub says STORE_RESET
// (as `codellm worker` exits), holds an assignment whose code starts with
// "hold" until released, retries a settlement the hub could not store until
// the assignment deadline, and keeps a ledger of what it ran.
type chaosWorker struct {
	w       *sigWorker
	held    chan *bridge.Assignment
	release chan struct{}
	reset   chan struct{}

	mu       sync.Mutex
	ran      map[string]int
	settled  map[string]int
	unstored int // settle answers 503 STORE_UNAVAILABLE
}

func (c *chaosWorker) isReset(r reply) bool {
	return r.status == 401 && bridge.DecodeError(r.status, r.body).Code == bridge.CodeStoreReset
}

func (c *chaosWorker) serve(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	c.reset = make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.reset)
		for ctx.Err() == nil {
			if r := c.w.register(ctx); r.status != 200 {
				if c.isReset(r) {
					return
				}
				sleepCtx(ctx, 20*time.Millisecond)
				continue
			}
			r, a := c.w.lease(ctx, 300)
			if c.isReset(r) {
				return
			}
			if r.status != 200 || a == nil || c.w.ack(ctx, a).status != 200 {
				continue
			}
			if c.run(ctx, a) {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// run executes and settles one assignment; it reports a store reset.
func (c *chaosWorker) run(ctx context.Context, a *bridge.Assignment) bool {
	c.mu.Lock()
	c.ran[a.AssignmentID]++
	c.mu.Unlock()
	if files, _ := a.Request.Object().Get("body"); files != nil && strings.Contains(string(mustCanonical(a)), `"content":"hold`) {
		c.held <- a
		<-c.release
	}
	deadline, _ := bridge.ParseTime(a.ExpiresAt)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		r := c.w.settle(ctx, a)
		switch {
		case r.status == 200:
			c.mu.Lock()
			c.settled[a.AssignmentID]++
			c.mu.Unlock()
			return false
		case c.isReset(r):
			return true
		case r.status == 503 && bridge.DecodeError(r.status, r.body).Code == bridge.CodeStoreUnavailable:
			c.mu.Lock()
			c.unstored++
			c.mu.Unlock()
		case r.status != -1 && r.status < 500:
			return false // fenced or expired: the hub decided
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return false
}

func mustCanonical(a *bridge.Assignment) []byte {
	b, _ := bridge.Canonical(a.Request.Object())
	return b
}

// load runs clients against both replicas, each checking it got its own
// result, and counts answers by status and code.
type load struct {
	mu     sync.Mutex
	counts map[string]int
	ok     atomic.Int64
	bad    []string
}

func (l *load) run(ctx context.Context, roots []string, n int) (stop func()) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ctx.Err() == nil; j++ {
				code := fmt.Sprintf("c-%d-%d", i, j)
				out, r := execOn(ctx, roots[(i+j)%len(roots)], code)
				if ctx.Err() != nil {
					return
				}
				l.note(code, out, r)
				if r.status != 200 {
					sleepCtx(ctx, 50*time.Millisecond)
				}
			}
		}()
	}
	return wg.Wait
}

func (l *load) note(code, out string, r reply) {
	key := strconv.Itoa(r.status)
	if r.status != 200 {
		key += " " + bridge.DecodeError(r.status, r.body).Message
		if i := bytes.Index(r.body, []byte(`"error":"`)); i >= 0 {
			key = strconv.Itoa(r.status) + " " + strings.SplitN(string(r.body[i+9:]), `"`, 2)[0]
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[key]++
	switch {
	case r.status == 200 && out != "ran:"+code:
		l.bad = append(l.bad, fmt.Sprintf("%s got %q", code, out))
	case r.status == 200:
		l.ok.Add(1)
	case r.status == 503 || r.status == 504:
	case r.status == 502 && strings.Contains(string(r.body), `"error":"outcome_unknown"`):
		// Redis lost its data (flushed, restarted empty) while the request was in flight: whether the
		// worker ran it cannot be known any more, and it is not run again.
	case r.status == 429 && strings.Contains(string(r.body), `"error":"rate_limited"`):
		// The worker has capacity 1: while it holds hold-1 (step 1, before Redis stops) a load request
		// is honestly refused as busy. That happens only when the load's request lands in that window,
		// which a loaded machine widens; it is an answer the hub documents, not a wrong one.
	default:
		l.bad = append(l.bad, fmt.Sprintf("%s: %d %s", code, r.status, r.body))
	}
}

func (l *load) waitOK(t *testing.T, more int64, what string) {
	t.Helper()
	want := l.ok.Load() + more
	for end := time.Now().Add(20 * time.Second); l.ok.Load() < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: load did not succeed again (%v)", what, l.counts)
		}
	}
}

// wantReady polls /readyz of every replica until it answers status with
// body containing want.
func wantReady(t *testing.T, rs []*replica, status int, want string) {
	t.Helper()
	for _, r := range rs {
		var got reply
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if got = getURL(r.root + "/readyz"); got.status == status && strings.Contains(string(got.body), want) {
				break
			}
		}
		if got.status != status || !strings.Contains(string(got.body), want) {
			t.Fatalf("readyz %s: %d %s, want %d %s", r.root, got.status, got.body, status, want)
		}
	}
}

// Two hub replicas and a worker under load while the real redis-server is
// stopped, restarted with its data (AOF), flushed, and restarted empty: the
// documented statuses at each step, no result delivered to the wrong
// client, no assignment run or settled twice, an assignment in flight across
// the outage completed, and recovery without restarting hub or worker.
func TestRedisFaultsUnderLoad(t *testing.T) {
	rp := startOwnRedis(t, "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--maxmemory-policy", "noeviction")
	a, b := replicaAt(t, rp.url()), replicaAt(t, rp.url())
	reps := []*replica{a, b}
	cw := &chaosWorker{w: newSigWorker(t, "chaos-vm", a.base, b.base), held: make(chan *bridge.Assignment, 1),
		release: make(chan struct{}), ran: map[string]int{}, settled: map[string]int{}}
	defer cw.w.close()
	cw.w.pair(b.base)
	stopWorker := cw.serve(t)
	defer func() { stopWorker() }()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{counts: map[string]int{}}
	stopLoad := l.run(ctx, []string{a.root, b.root}, 2)
	defer func() { cancel(); stopLoad() }()
	l.waitOK(t, 3, "healthy")
	wantReady(t, reps, 200, `"store":"ok"`)

	// 1. Redis stops while the worker holds an acknowledged assignment.
	held := make(chan reply, 1)
	go func() { _, r := execOn(context.Background(), a.root, "hold-1"); held <- r }()
	asg := <-cw.held
	rp.stop()
	_, r := execOn(context.Background(), b.root, "during-outage")
	if r.status != 503 || !strings.Contains(string(r.body), `"error":"store_unavailable"`) {
		t.Fatalf("exec while Redis is down: %d %s", r.status, r.body)
	}
	wantReady(t, reps, 503, `"store":"unreachable"`)
	if r := getURL(a.root + "/healthz"); r.status != 200 {
		t.Fatalf("healthz while Redis is down: %d", r.status)
	}
	cw.release <- struct{}{} // its settlement now meets the outage and is retried
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cw.mu.Lock()
		n := cw.unstored
		cw.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the settlement never met the outage")
		}
	}

	// 2. Redis returns with its data: the held assignment completes, load recovers.
	rp.start()
	if r := <-held; r.status != 200 || !strings.Contains(string(r.body), "ran:hold-1") {
		t.Fatalf("assignment in flight across the outage: %d %s", r.status, r.body)
	}
	wantReady(t, reps, 200, `"store":"ok"`)
	l.waitOK(t, 3, "after the restart with data")

	// 3. Redis is flushed: the worker is told STORE_RESET and stops; both
	// replicas report the reset; pairing again restores service.
	c := rp.client()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	waitReset(t, cw)
	wantReady(t, reps, 200, `"store":"reset"`)
	if _, r := execOn(context.Background(), a.root, "no-worker"); r.status != 503 || !strings.Contains(string(r.body), "worker_unavailable") {
		t.Fatalf("exec with the worker's credential gone: %d %s", r.status, r.body)
	}
	cw.w.pair(a.base)
	stopWorker = cw.serve(t)
	l.waitOK(t, 3, "after pairing again")

	// 4. Redis restarts without its data: detected again.
	rp.stop()
	rp.wipe()
	rp.start()
	waitReset(t, cw)
	cw.w.pair(b.base)
	stopWorker = cw.serve(t)
	l.waitOK(t, 3, "after the restart without data")

	cancel()
	stopLoad()
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for id, n := range cw.ran {
		if n != 1 || cw.settled[id] > 1 {
			t.Errorf("assignment %s ran %d times, settled %d times", id, n, cw.settled[id])
		}
	}
	if cw.settled[asg.AssignmentID] != 1 {
		t.Errorf("held assignment settled %d times", cw.settled[asg.AssignmentID])
	}
	if len(l.bad) > 0 {
		t.Fatalf("wrong answers: %v", l.bad)
	}
	t.Logf("client answers: %v; worker ran %d assignments, %d settle attempts met the outage", l.counts, len(cw.ran), cw.unstored)
}

func waitReset(t *testing.T, cw *chaosWorker) {
	t.Helper()
	select {
	case <-cw.reset:
	case <-time.After(15 * time.Second):
		t.Fatal("the worker was never told STORE_RESET")
	}
}
