package filestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/hub/redisstore"
)

var (
	redisURL  string
	redisSkip string
)

func TestMain(m *testing.M) {
	code := func() int {
		if u := os.Getenv("CODELLM_TEST_REDIS_URL"); u != "" {
			redisURL = u
		} else if u, stop, err := startRedis(); err != nil {
			redisSkip = err.Error()
		} else {
			redisURL = u
			defer stop()
		}
		ignore := goleak.IgnoreCurrent()
		if c := m.Run(); c != 0 {
			return c
		}
		if err := goleak.Find(ignore); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
		return 0
	}()
	os.Exit(code)
}

// startRedis runs a private redis-server on a free loopback port.
func startRedis() (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found (apt-get install -y redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "codellm-fs-redis-")
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--maxmemory-policy", "noeviction")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() { _ = cmd.Process.Kill(); <-exited; _ = os.RemoveAll(dir) }
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	opt, _ := redis.ParseURL(url)
	c := redis.NewClient(opt)
	defer c.Close()
	for i := 0; i < 200; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return url, stop, nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	stop()
	return "", nil, fmt.Errorf("redis-server on port %d did not answer", port)
}

// clock is a settable time source shared by a store under test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type opener func(t *testing.T, l Limits, c *clock) Store

func openDir(t *testing.T, l Limits, c *clock) Store {
	d, err := OpenDir(filepath.Join(t.TempDir(), "files"), l)
	if err != nil {
		t.Fatal(err)
	}
	d.now = c.now
	t.Cleanup(func() { _ = d.Close() })
	return d
}

var prefixSeq int

func openRedis(t *testing.T, l Limits, c *clock) Store {
	if redisURL == "" {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatal(redisSkip)
		}
		t.Skip(redisSkip)
	}
	opt, _ := redis.ParseURL(redisURL)
	rdb := redis.NewClient(opt)
	prefixSeq++
	r := NewRedis(rdb, fmt.Sprintf("test:%s:%d:", t.Name(), prefixSeq), l)
	r.now = c.now
	t.Cleanup(func() { _ = r.Close(); _ = rdb.Close() })
	return r
}

// openIndexedBolt is the index in the embedded bbolt backend with blobs in a directory (the one-node hub).
func openIndexedBolt(t *testing.T, l Limits, c *clock) Store {
	bs, err := boltstore.Open(filepath.Join(t.TempDir(), "bridge.db"), boltstore.WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := OpenDirBlobs(filepath.Join(t.TempDir(), "files"))
	if err != nil {
		t.Fatal(err)
	}
	x := NewIndexed(bs.Backend(), blobs, l)
	t.Cleanup(func() { _ = x.Close(); _ = bs.Close() })
	return x
}

// openIndexedRedis is the index in the Redis backend with blobs in Redis (hub replicas).
func openIndexedRedis(t *testing.T, l Limits, c *clock) Store {
	if redisURL == "" {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatal(redisSkip)
		}
		t.Skip(redisSkip)
	}
	prefixSeq++
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), prefixSeq)
	rs, err := redisstore.Open(context.Background(), redisURL, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := redis.ParseURL(redisURL)
	rdb := redis.NewClient(opt)
	x := NewIndexed(rs.Backend(), NewRedisBlobs(rdb, prefix), l)
	x.now = c.now
	t.Cleanup(func() { _ = x.Close(); _ = rdb.Close(); _ = rs.Close() })
	return x
}

func backends() map[string]opener {
	return map[string]opener{"dir": openDir, "redis": openRedis, "indexed-bolt": openIndexedBolt, "indexed-redis": openIndexedRedis}
}

func TestConformance(t *testing.T) {
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Run("roundtrip", func(t *testing.T) { testRoundtrip(t, open) })
			t.Run("tenants", func(t *testing.T) { testTenants(t, open) })
			t.Run("limits", func(t *testing.T) { testLimits(t, open) })
			t.Run("expiry", func(t *testing.T) { testExpiry(t, open) })
			t.Run("delete", func(t *testing.T) { testDelete(t, open) })
			t.Run("tenant-cap", func(t *testing.T) { testTenantCap(t, open) })
		})
	}
}

// testDelete: a deleted file is gone from List and Get, its bytes leave the session's and the store's
// usage (the freed room takes a new file), a foreign tenant cannot delete, and a second delete is
// ErrNotFound. The read-only mark survives the store.
func testDelete(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t, Limits{MaxSessionBytes: 10, MaxTotalBytes: 10}, newClock())
	sid := NewID()
	files, err := s.Put(ctx, "acme", sid, []Upload{{Name: "a.txt", Data: []byte("12345678")}, {Name: "skill/SKILL.md", Data: []byte("#"), ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if f, _, err := s.Get(ctx, "acme", sid, files[1].ID); err != nil || !f.ReadOnly {
		t.Fatalf("read-only file = %+v %v", f, err)
	}
	if _, err := s.Put(ctx, "acme", sid, []Upload{{Name: "b.txt", Data: []byte("12345")}}); !errors.Is(err, ErrSessionFull) {
		t.Fatalf("full session took more: %v", err)
	}
	if err := s.Delete(ctx, "evil", sid, files[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("foreign Delete: %v", err)
	}
	if err := s.Delete(ctx, "acme", sid, files[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "acme", sid, files[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	if _, _, err := s.Get(ctx, "acme", sid, files[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted file still reads: %v", err)
	}
	if list, err := s.List(ctx, "acme", sid); err != nil || len(list) != 1 || list[0].ID != files[1].ID {
		t.Fatalf("List after Delete = %+v %v", list, err)
	}
	if _, err := s.Put(ctx, "acme", sid, []Upload{{Name: "b.txt", Data: []byte("12345")}}); err != nil {
		t.Fatalf("the deleted file's room was not freed: %v", err)
	}
	if err := s.Delete(ctx, "acme", NewID(), files[1].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
}

// testTenantCap (issue 35 item 9): one tenant cannot fill the store. Its sessions together stop at
// MaxTenantBytes, and another tenant still has room; a delete gives the tenant its room back.
func testTenantCap(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t, Limits{MaxTenantBytes: 10, MaxTotalBytes: 20}, newClock())
	a1, a2, b1 := NewID(), NewID(), NewID()
	files, err := s.Put(ctx, "acme", a1, []Upload{{Name: "a", Data: make([]byte, 6)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "acme", a2, []Upload{{Name: "a", Data: make([]byte, 5)}}); !errors.Is(err, ErrTenantFull) {
		t.Fatalf("a second session past the tenant's cap: %v", err)
	}
	if _, err := s.Put(ctx, "other", b1, []Upload{{Name: "b", Data: make([]byte, 10)}}); err != nil {
		t.Fatalf("another tenant was refused: %v", err)
	}
	if err := s.Delete(ctx, "acme", a1, files[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "acme", a2, []Upload{{Name: "a", Data: make([]byte, 10)}}); err != nil {
		t.Fatalf("the tenant's freed room: %v", err)
	}
}

// newClock starts at the real time: Redis expires keys on its own clock.
func newClock() *clock { return &clock{t: time.Now().Truncate(time.Second)} }

func testRoundtrip(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t, Limits{}, newClock())
	sid := NewID()
	bin := []byte{0, 1, 2, 0xff, '\n', '\r'}
	files, err := s.Put(ctx, "acme", sid, []Upload{{Name: "data.csv", Data: []byte("a,b\n1,2\n"), EntityID: "asst_1"}, {Name: "out/x.bin", Data: bin}})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || !ValidID(files[0].ID) || !ValidID(files[1].ID) || files[0].ID == files[1].ID {
		t.Fatalf("files = %+v", files)
	}
	f, b, err := s.Get(ctx, "acme", sid, files[1].ID)
	if err != nil || !bytes.Equal(b, bin) || f.Name != "out/x.bin" || f.Size != int64(len(bin)) || f.SessionID != sid {
		t.Fatalf("Get = %+v %q %v", f, b, err)
	}
	more, err := s.Put(ctx, "acme", sid, []Upload{{Name: "data.csv", Data: []byte("v2")}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "acme", sid)
	if err != nil || len(list) != 3 || list[2].ID != more[0].ID || list[0].EntityID != "asst_1" {
		t.Fatalf("List = %+v %v", list, err)
	}
	if owner, err := s.Owner(ctx, sid); err != nil || owner != "acme" {
		t.Fatalf("Owner = %q %v", owner, err)
	}
	if _, _, err := s.Get(ctx, "acme", sid, NewID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown file: %v", err)
	}
	if _, err := s.Owner(ctx, NewID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	for _, bad := range []string{"", "../x", "/etc/passwd", "a//b", "a\\b", "x\n", "./a"} {
		if _, err := s.Put(ctx, "acme", sid, []Upload{{Name: bad, Data: []byte("x")}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("name %q: %v", bad, err)
		}
	}
	if _, err := s.Put(ctx, "acme", "short", []Upload{{Name: "a", Data: nil}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad session id: %v", err)
	}
}

func testTenants(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t, Limits{}, newClock())
	sid := NewID()
	files, err := s.Put(ctx, "acme", sid, []Upload{{Name: "secret.txt", Data: []byte("s3cret")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "evil", sid, files[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("foreign Get: %v", err)
	}
	if l, err := s.List(ctx, "evil", sid); err != nil || len(l) != 0 {
		t.Fatalf("foreign List: %v %v", l, err)
	}
	if _, err := s.Put(ctx, "evil", sid, []Upload{{Name: "planted.txt", Data: []byte("x")}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("foreign Put: %v", err)
	}
	if err := s.Touch(ctx, "evil", sid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("foreign Touch: %v", err)
	}
	if l, _ := s.List(ctx, "acme", sid); len(l) != 1 {
		t.Fatalf("the foreign Put stored something: %+v", l)
	}
	// Touch creates an empty session that then belongs to its tenant.
	empty := NewID()
	if err := s.Touch(ctx, "evil", empty); err != nil {
		t.Fatal(err)
	}
	if o, err := s.Owner(ctx, empty); err != nil || o != "evil" {
		t.Fatalf("Owner after Touch = %q %v", o, err)
	}
	if _, err := s.Put(ctx, "acme", empty, []Upload{{Name: "a", Data: []byte("x")}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Put into a touched foreign session: %v", err)
	}
}

func testLimits(t *testing.T, open opener) {
	ctx := context.Background()
	l := Limits{MaxFileBytes: 10, MaxSessionBytes: 20, MaxSessionFiles: 3, MaxTotalBytes: 30}
	s := open(t, l, newClock())
	a, b := NewID(), NewID()
	cases := []struct {
		sid   string
		files []Upload
		want  error
	}{
		{a, []Upload{{Name: "big", Data: make([]byte, 11)}}, ErrFileTooLarge},
		{a, []Upload{{Name: "1", Data: make([]byte, 10)}, {Name: "2", Data: make([]byte, 10)}, {Name: "3", Data: []byte("x")}}, ErrSessionFull},
		{a, []Upload{{Name: "1"}, {Name: "2"}, {Name: "3"}, {Name: "4"}}, ErrTooManyFiles},
		{a, []Upload{{Name: "1", Data: make([]byte, 10)}, {Name: "2", Data: make([]byte, 9)}}, nil}, // 19 of 20
		{a, []Upload{{Name: "3", Data: make([]byte, 2)}}, ErrSessionFull},
		{a, []Upload{{Name: "3", Data: make([]byte, 1)}}, nil},           // 20 of 20, 3 files
		{a, []Upload{{Name: "4"}}, ErrTooManyFiles},                      // a 4th, even empty
		{b, []Upload{{Name: "x", Data: make([]byte, 10)}}, ErrStoreFull}, // 20 + 10 > 30? no: = 30
	}
	cases[len(cases)-1].want = nil
	for i, c := range cases {
		_, err := s.Put(ctx, "acme", c.sid, c.files)
		if (c.want == nil && err != nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Fatalf("case %d: err = %v, want %v", i, err, c.want)
		}
	}
	if _, err := s.Put(ctx, "acme", NewID(), []Upload{{Name: "one", Data: []byte("x")}}); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("over the total: %v", err)
	}
	if la, _ := s.List(ctx, "acme", a); len(la) != 3 {
		t.Fatalf("session a has %d files, want 3 (refused batches stored something)", len(la))
	}
	if _, err := s.Owner(ctx, NewID()); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
}

func testExpiry(t *testing.T, open opener) {
	ctx := context.Background()
	c := newClock()
	s := open(t, Limits{MaxTotalBytes: 10, TTL: time.Hour}, c)
	sid := NewID()
	files, err := s.Put(ctx, "acme", sid, []Upload{{Name: "a", Data: make([]byte, 10)}})
	if err != nil {
		t.Fatal(err)
	}
	c.add(59 * time.Minute)
	if err := s.Touch(ctx, "acme", sid); err != nil { // extends the life to 1h59m
		t.Fatal(err)
	}
	c.add(59 * time.Minute)
	if _, _, err := s.Get(ctx, "acme", sid, files[0].ID); err != nil {
		t.Fatalf("touched session expired early: %v", err)
	}
	c.add(2 * time.Minute)
	if _, _, err := s.Get(ctx, "acme", sid, files[0].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired file: %v", err)
	}
	if _, err := s.Owner(ctx, sid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired session: %v", err)
	}
	// Its bytes no longer count against the total (the indexed stores count them until their usage
	// bucket ends, at most one granularity later), and a new owner may take the id.
	c.add(granularity(time.Hour))
	if _, err := s.Put(ctx, "other", sid, []Upload{{Name: "b", Data: make([]byte, 10)}}); err != nil {
		t.Fatalf("the expired session still counts: %v", err)
	}
	if l, _ := s.List(ctx, "other", sid); len(l) != 1 || l[0].Name != "b" {
		t.Fatalf("re-created session lists %+v", l)
	}
}

func TestDirReopen(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "files")
	d, err := OpenDir(root, Limits{MaxTotalBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	sid := NewID()
	files, err := d.Put(ctx, "acme", sid, []Upload{{Name: "a.txt", Data: []byte("12345")}})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close()
	// A blob no meta.json lists (a crash between the two writes) is removed at open.
	stray := filepath.Join(root, sid, NewID())
	if err := os.WriteFile(stray, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err = OpenDir(root, Limits{MaxTotalBytes: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, b, err := d.Get(ctx, "acme", sid, files[0].ID); err != nil || string(b) != "12345" {
		t.Fatalf("after reopen: %q %v", b, err)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Fatalf("stray blob kept: %v", err)
	}
	if _, err := d.Put(ctx, "acme", NewID(), []Upload{{Name: "b", Data: []byte("1234")}}); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("the total was not rebuilt at open: %v", err)
	}
}

// hookBlobs runs after each blob write, before the Put that wrote it reaches the index.
type hookBlobs struct {
	Blobs
	after func(sid string)
}

func (h *hookBlobs) Put(ctx context.Context, sid, id string, data []byte, expires time.Time) error {
	if err := h.Blobs.Put(ctx, sid, id, data, expires); err != nil {
		return err
	}
	h.after(sid)
	return nil
}

// TestSweepSparesUploadsInFlight (issue 35 item 8): between a Put's blob writes and its index
// transaction, a sweep (another upload's, a minute later) and another Put's cleanup in the same new
// session run. Before the fix the sweep took the blobs for a dead session's and the cleanup removed the
// session's directory, so the Put failed (500) or answered files whose download was 404.
func TestSweepSparesUploadsInFlight(t *testing.T) {
	ctx := context.Background()
	c := newClock()
	bs, err := boltstore.Open(filepath.Join(t.TempDir(), "bridge.db"), boltstore.WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	dir, err := OpenDirBlobs(filepath.Join(t.TempDir(), "files"))
	if err != nil {
		t.Fatal(err)
	}
	hook := &hookBlobs{Blobs: dir}
	x := NewIndexed(bs.Backend(), hook, Limits{})
	hook.after = func(sid string) {
		c.add(2 * time.Minute) // the sweep is due
		x.sweep(ctx, x.now())
		_ = dir.Delete(ctx, sid, []string{NewID()}) // a refused Put's cleanup in the same session
	}
	for range 3 {
		sid := NewID()
		files, err := x.Put(ctx, "acme", sid, []Upload{{Name: "a.txt", Data: []byte("a")}, {Name: "b.txt", Data: []byte("b")}})
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		for _, f := range files {
			if _, b, err := x.Get(ctx, "acme", sid, f.ID); err != nil || len(b) != 1 {
				t.Fatalf("stored %s reads %q %v", f.Name, b, err)
			}
		}
	}
	// A dead session's blobs are still swept once nothing is in flight.
	dead := NewID()
	if err := dir.Put(ctx, dead, NewID(), []byte("x"), c.now()); err != nil {
		t.Fatal(err)
	}
	c.add(2 * time.Minute)
	x.sweep(ctx, x.now())
	if _, err := os.Stat(filepath.Join(dir.root, dead)); !os.IsNotExist(err) {
		t.Fatalf("the dead session's blobs were kept: %v", err)
	}
}

// BenchmarkIndexedPut measures an upload's cost against the number of live sessions (issue 35 item 9:
// the old usage record listed every session, 1.0 → 9.25 ms CPU per upload after 3 000 sessions).
// go test ./internal/hub/filestore -run '^$' -bench IndexedPut
func BenchmarkIndexedPut(b *testing.B) {
	for _, n := range []int{0, 3000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			ctx := context.Background()
			bs, err := boltstore.Open(filepath.Join(b.TempDir(), "bridge.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer bs.Close()
			blobs, _ := OpenDirBlobs(filepath.Join(b.TempDir(), "files"))
			x := NewIndexed(bs.Backend(), blobs, Limits{})
			for i := 0; i < n; i++ {
				if _, err := x.Put(ctx, fmt.Sprintf("t%d", i%50), NewID(), []Upload{{Name: "a", Data: []byte("x")}}); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if _, err := x.Put(ctx, "acme", NewID(), []Upload{{Name: "a", Data: []byte("x")}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUsageLegacyRecord: a usage record of the older shape (one entry per session) is read as buckets,
// so an upgraded hub keeps counting the sessions it already holds.
func TestUsageLegacyRecord(t *testing.T) {
	now := time.Now()
	gran := granularity(DefaultTTL)
	legacy := fmt.Sprintf(`{"%s":{"bytes":7,"expires":%q},"%s":{"bytes":5,"expires":%q}}`, NewID(),
		now.Add(time.Hour).Format(time.RFC3339Nano), NewID(), now.Add(-time.Hour).Format(time.RFC3339Nano))
	u, err := decodeUsage([]byte(legacy), gran)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.total(now); got != 7 {
		t.Fatalf("legacy record counts %d bytes, want the live session's 7", got)
	}
}
