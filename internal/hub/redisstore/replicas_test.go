package redisstore_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/redisstore"
)

// replica is one in-process hub on the shared Redis keyspace.
type replica struct {
	h    *hub.Hub
	srv  *httptest.Server
	root string // http://addr
	base string // http://addr/v1
}

// newReplica starts a hub over its own Store on prefix. With feed, the
// store's change feed wakes the hub (as RunCLI wires it).
func newReplica(t *testing.T, prefix string, feed bool, mod func(*hub.Config)) *replica {
	t.Helper()
	st, err := redisstore.Open(context.Background(), needRedis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	// A poll interval far beyond every deadline in these tests: whatever
	// reaches a replica in time got there through the change feed.
	cfg := hub.Config{AdminToken: adminToken, ClientKeys: []hub.ClientKey{{Key: apiKey, TenantID: "default"}}, PollInterval: time.Minute}
	if mod != nil {
		mod(&cfg)
	}
	return serveReplica(t, st, cfg, feed)
}

// serveReplica runs a hub over st on a loopback server until the test ends.
func serveReplica(t *testing.T, st *redisstore.Store, cfg hub.Config, feed bool) *replica {
	t.Helper()
	h, err := hub.New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if feed {
		go func() { defer close(done); _ = st.WatchChanges(ctx, h.ReplicaID(), h.Notify) }()
	} else {
		close(done)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
		cancel()
		<-done
		_ = st.Close()
	})
	return &replica{h: h, srv: srv, root: srv.URL, base: srv.URL + "/v1"}
}

// A worker long-polling on replica A executes work submitted to replica B
// at once: the client's deadline (2 s) is far shorter than the lease wait
// (20 s) and the poll interval (1 min), so only the change feed can deliver
// it in time. Without the feed the same request expires — the differential.
func TestCrossReplicaWake(t *testing.T) {
	for _, feed := range []bool{true, false} {
		t.Run(fmt.Sprintf("feed=%v", feed), func(t *testing.T) {
			prefix := freshPrefix()
			short := func(c *hub.Config) { c.ExecTimeout = 2 * time.Second }
			a := newReplica(t, prefix, feed, short)
			b := newReplica(t, prefix, feed, short)
			w := newSigWorker(t, "wake-vm", a.base)
			defer w.close()
			w.pair(b.base)
			if r := w.register(context.Background()); r.status != 200 {
				t.Fatalf("register: %d %s", r.status, r.body)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			leased := make(chan *bridge.Assignment, 1)
			go func() {
				// One long poll on A; it answers when work arrives or at 20 s.
				r, as := w.lease(ctx, 20000)
				if r.status != 200 && ctx.Err() == nil {
					t.Errorf("lease: %d %s", r.status, r.body)
				}
				leased <- as
			}()
			// Let the poll start and block on A before submitting on B.
			time.Sleep(200 * time.Millisecond)
			type result struct {
				out string
				r   reply
			}
			res := make(chan result, 1)
			go func() { out, r := execOn(ctx, b.root, "print('wake')"); res <- result{out, r} }()

			if !feed {
				got := <-res
				if got.r.status == 200 {
					t.Fatalf("without the change feed the work arrived anyway: %s", got.r.body)
				}
				cancel() // end the long poll
				<-leased
				return
			}
			as := <-leased
			if as == nil {
				t.Fatal("the long poll on A returned empty")
			}
			if r := w.ack(ctx, as); r.status != 200 {
				t.Fatalf("ack: %d %s", r.status, r.body)
			}
			if r := w.settle(ctx, as); r.status != 200 {
				t.Fatalf("settle: %d %s", r.status, r.body)
			}
			got := <-res
			if got.r.status != 200 || got.out != "ran:print('wake')" {
				t.Fatalf("exec on B: %d %s", got.r.status, got.r.body)
			}
		})
	}
}

// 200 assignments through two replicas and three workers: every client
// gets its own result and every assignment is leased and settled exactly
// once.
func TestConcurrentAssignments(t *testing.T) {
	prefix := freshPrefix()
	unlimited := func(c *hub.Config) { c.RateLimits.Off = true } // one caller sends all 200 (the limits: limits_test.go)
	reps := []*replica{newReplica(t, prefix, true, unlimited), newReplica(t, prefix, true, unlimited)}

	var mu sync.Mutex
	settled := map[string]int{}
	var stops []func()
	for i := range 3 {
		// Each worker polls one replica and falls back to the other.
		w := newSigWorker(t, fmt.Sprintf("conc-%d", i), reps[i%2].base, reps[(i+1)%2].base)
		defer w.close()
		w.pair(reps[(i+1)%2].base)
		stops = append(stops, w.serve(5000, func(a *bridge.Assignment, r reply) {
			mu.Lock()
			defer mu.Unlock()
			if r.status != 200 {
				t.Errorf("settle %s: %d %s", a.AssignmentID, r.status, r.body)
				return
			}
			settled[a.AssignmentID]++
		}))
	}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()

	const n, parallel = 200, 8
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				code := fmt.Sprintf("print(%d)", i)
				out, r := execOn(ctx, reps[i%2].root, code)
				if r.status != 200 || out != "ran:"+code {
					t.Errorf("exec %d on replica %d: %d %s", i, i%2, r.status, r.body)
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	for _, s := range stops {
		s()
	}
	stops = nil
	mu.Lock()
	defer mu.Unlock()
	if len(settled) != n {
		t.Fatalf("%d assignments settled, want %d", len(settled), n)
	}
	for id, c := range settled {
		if c != 1 {
			t.Fatalf("assignment %s settled %d times", id, c)
		}
	}
}

// One tenant's waiting requests are served first come, first served across replicas: ten requests
// queued alternately on two replicas behind a busy one-slot worker run in the order they arrived (the
// queue is in Redis; each replica used to keep its own).
func TestQueueOrderAcrossReplicas(t *testing.T) {
	prefix := freshPrefix()
	a := newReplica(t, prefix, true, nil)
	b := newReplica(t, prefix, true, nil)
	w := newSigWorker(t, "fifo-vm", a.base)
	defer w.close()
	w.pair(b.base)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if r := w.register(ctx); r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	next := func() *bridge.Assignment { t.Helper(); return w.next(ctx, false) }
	done := make(chan reply, 11)
	go func() { _, r := execOn(ctx, a.root, "hold"); done <- r }()
	held := next()
	w.ack(ctx, held)
	const n = 10
	for i := range n {
		root := []string{a.root, b.root}[i%2]
		go func() { _, r := execOn(ctx, root, fmt.Sprintf("q%02d", i)); done <- r }()
		time.Sleep(50 * time.Millisecond) // arrival order
	}
	w.settle(ctx, held)
	var order []string
	for range n {
		as := next()
		order = append(order, codeOf(as))
		w.ack(ctx, as)
		w.settle(ctx, as)
	}
	for i, c := range order {
		if want := fmt.Sprintf("q%02d", i); c != want {
			t.Fatalf("run order %v", order)
		}
	}
	for range n + 1 {
		if r := <-done; r.status != 200 {
			t.Fatalf("client: %d %s", r.status, r.body)
		}
	}
}

// codeOf is the code of a sandbox assignment.
func codeOf(a *bridge.Assignment) string {
	body, _ := a.Request.Object().Get("body")
	files, _ := body.(*bridge.Object).Get("files")
	code, _ := files.([]any)[0].(*bridge.Object).Get("content")
	s, _ := code.(string)
	return s
}
