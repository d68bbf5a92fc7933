package redisstore_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/redisstore"
	"github.com/codellm/codellm/internal/hub/store"
)

// What one assignment costs in Redis commands, by store operation, counted with MONITOR (commands run by
// the commit script included, as Redis counts them): the figure issue 36 budgets (bench/hubload measures
// it through real hubs). The lease that delivers work queued for a waiting worker only reads — the
// dispatch put the work straight into the worker's lease claim — the settlement neither rewrites the
// queue record nor publishes twice, and neither keeps a per-dispatcher list (the sweeper finds a dead
// dispatcher's work in the worker locks). A change that adds a command to this path fails here with the table.
func TestCommandsPerOperation(t *testing.T) {
	ctx := context.Background()
	prefix := freshPrefix()
	s, err := redisstore.Open(ctx, needRedis(t), redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	auth := pairAndRegister(t, s)
	pools, err := s.Pools(ctx)
	if err != nil || len(pools) != 1 {
		t.Fatalf("pools %+v %v", pools, err)
	}
	budget := []struct {
		op   string
		max  int
		call func(a *store.Assignment) error
	}{
		{"take idle", 1, nil},
		{"enqueue", 9, nil}, // read, script, its check, 5 writes, 1 publish
		{"lease", 1, func(a *store.Assignment) error {
			l, err := s.LeaseSlot(ctx, store.LeaseParams{WorkerID: wid, IncarnationID: incA, IdentityID: auth.IdentityID, Auth: auth,
				Slot: -1, Woken: true, Queued: a.ID})
			if err == nil && (l == nil || l.ID != a.ID) {
				err = fmt.Errorf("leased %+v, want %s", l, a.ID)
			}
			return err
		}},
		{"ack", 4, func(a *store.Assignment) error {
			return s.Ack(ctx, store.AckParams{Auth: auth, WorkerID: wid, AssignmentID: a.ID, IncarnationID: incA,
				Generation: a.Generation, LeaseTokenHash: a.LeaseTokenHash})
		}},
		{"settle", 7, func(a *store.Assignment) error { // read, script, its check, 3 writes, 1 publish
			return s.Settle(ctx, store.SettleParams{Auth: auth, WorkerID: wid, AssignmentID: a.ID, IncarnationID: incA,
				Generation: a.Generation, LeaseTokenHash: a.LeaseTokenHash, IdentityID: auth.IdentityID,
				Status: bridge.StatusFulfilled, Canonical: []byte(`{"ok":1}`)})
		}},
		{"collect", 1, func(a *store.Assignment) error {
			st, err := s.Collect(ctx, wid, a.ID)
			if err == nil && st == nil {
				err = fmt.Errorf("nothing to collect")
			}
			return err
		}},
	}
	cycle := func(mark func(string)) {
		t.Helper()
		mark("take idle")
		if w, ok, err := s.TakeIdle(ctx, pools[0].ID); err != nil || !ok || w != wid {
			t.Fatalf("take idle: %q %v %v", w, ok, err)
		}
		mark("enqueue")
		a, err := s.Enqueue(ctx, store.EnqueueParams{WorkerID: wid, AssignmentID: bridge.NewID(), LeaseTokenHash: "h",
			ExpiresAt: time.Now().Add(time.Minute), Request: []byte(`{}`), Dispatcher: "replica-a", FromIdle: true,
			Session: &store.Session{ID: bridge.NewID(), TenantID: "default"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range budget[2:] {
			mark(b.op)
			if err := b.call(a); err != nil {
				t.Fatalf("%s: %v", b.op, err)
			}
		}
	}
	cycle(func(string) {}) // the worker's records reach their steady shape
	got := countCommands(t, prefix, cycle)
	var table []string
	failed := false
	for _, b := range budget {
		table = append(table, fmt.Sprintf("%s %d (budget %d)", b.op, got[b.op], b.max))
		failed = failed || got[b.op] > b.max || got[b.op] == 0
	}
	if failed {
		t.Fatalf("Redis commands per operation: %s", strings.Join(table, ", "))
	}
	t.Logf("Redis commands per operation: %s", strings.Join(table, ", "))
}

// countCommands runs drive under MONITOR and returns, by the name drive last marked, how many commands
// touched a key or channel under prefix.
func countCommands(t *testing.T, prefix string, drive func(mark func(string))) map[string]int {
	t.Helper()
	lines := monitor(t)
	marker := prefix + "mark:"
	echo := func(s string) {
		if err := rawClient(t).Echo(context.Background(), marker+s).Err(); err != nil {
			t.Fatal(err)
		}
	}
	echo("start")
	drive(echo)
	echo("end")
	got := map[string]int{}
	cur := ""
	for end := time.After(30 * time.Second); ; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("MONITOR ended before the end mark")
			}
			if _, name, marked := strings.Cut(l, marker); marked {
				cur = strings.TrimSuffix(name, `"`)
				if cur == "end" {
					return got
				}
			} else if strings.Contains(l, prefix) && cur != "" && cur != "start" {
				got[cur]++
			}
		case <-end:
			t.Fatal("MONITOR never showed the end mark")
		}
	}
}

// monitor opens a connection of its own in MONITOR mode (go-redis's MonitorCmd spins on its connection)
// and streams its lines until the test ends.
func monitor(t *testing.T) <-chan string {
	t.Helper()
	opt, err := redis.ParseURL(needRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", opt.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimRight(l, "\r\n")
		}
	}()
	return lines
}
