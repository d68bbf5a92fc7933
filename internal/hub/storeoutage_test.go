package hub

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/hub/filestore"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/hub/storetest"
)

// lockedBuf is a log sink the test can read while the hub writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// newFaultHub is a test hub whose store can be taken down: the protocol over
// a FaultBackend over the embedded backend. mods change its configuration.
func newFaultHub(t *testing.T, mods ...func(*Config)) (*testHub, *storetest.FaultBackend, *lockedBuf) {
	t.Helper()
	bs, err := boltstore.Open(filepath.Join(t.TempDir(), "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	fb := storetest.NewFaultBackend(bs.Backend())
	st := store.NewProtocol(fb, store.Options{})
	fs, err := filestore.OpenDir(filepath.Join(t.TempDir(), "files"), filestore.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	cfg := Config{AdminToken: adminToken, ClientKeys: []ClientKey{{Key: apiKey, TenantID: "default"}},
		PollInterval: 20 * time.Millisecond, Files: fs, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	for _, mod := range mods {
		mod(&cfg)
	}
	h, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
		_ = st.Close()
		_ = fs.Close()
	})
	return &testHub{Hub: h, srv: srv, base: srv.URL + "/v1", store: bs}, fb, logs
}

func get(t *testing.T, url string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	return doHTTP(t, req)
}

// A store outage is a 503 store_unavailable with Retry-After on client and
// worker routes (it was a bare 500), /readyz fails and says why while
// /healthz stays 200, store errors are counted by operation and logged once;
// an assignment in flight across the outage completes once it ends.
func TestStoreOutage(t *testing.T) {
	// Without the rate limiter, whose store read would refuse the execs first (TestRateLimitFailsClosed).
	h, fb, logs := newFaultHub(t, func(c *Config) { c.RateLimits.Off = true })
	w := newWorker(t, h, "outage-vm")
	w.pair(h)
	w.mustRegister()
	if r := get(t, h.srv.URL+"/readyz"); r.status != 200 || !strings.Contains(string(r.body), `"store":"ok"`) {
		t.Fatalf("readyz before: %d %s", r.status, r.body)
	}

	// An assignment leased and acknowledged, then the store goes away.
	done := make(chan reply, 1)
	go func() { done <- h.client(t, "/v1/exec", `{"lang":"py","code":"inflight"}`, nil) }()
	a := w.mustLease()
	if r := w.ack(a); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	fb.SetDown(true)

	r := h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, nil)
	if r.status != 503 || !strings.Contains(string(r.body), `"error":"store_unavailable"`) || r.header.Get("Retry-After") != "1" {
		t.Fatalf("exec during outage: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	r = h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, map[string]string{"Idempotency-Key": "outage-key-1"})
	if r.status != 503 || !strings.Contains(string(r.body), `"error":"store_unavailable"`) || r.header.Get("Retry-After") != "1" {
		t.Fatalf("keyed exec during outage: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	r = h.client(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	if r.status != 503 || !strings.Contains(string(r.body), "store_unavailable") {
		t.Fatalf("chat during outage: %d %s", r.status, r.body)
	}
	// The worker's settlement cannot be stored: 503, retried below.
	s := runnerReply(a, w.incarnation)
	r = w.settle(a, s)
	if r.status != 503 || r.code() != bridge.CodeStoreUnavailable || r.header.Get("Retry-After") != "1" {
		t.Fatalf("settle during outage: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r, _ := w.register(); r.status != 503 || r.code() != bridge.CodeStoreUnavailable {
		t.Fatalf("register during outage: %d %s", r.status, r.body)
	}
	if r := get(t, h.srv.URL+"/readyz"); r.status != 503 || !strings.Contains(string(r.body), "injected store failure") ||
		!strings.Contains(string(r.body), `"store":"unreachable"`) {
		t.Fatalf("readyz during outage: %d %s", r.status, r.body)
	}
	if r := get(t, h.srv.URL+"/healthz"); r.status != 200 {
		t.Fatalf("healthz during outage: %d", r.status)
	}
	m := get(t, h.srv.URL+"/metrics")
	// The dispatch's first store call is taking a worker (the queue was found empty just before: queueHints).
	for _, op := range []string{"take_idle", "use_nonce", "epoch"} {
		line := `codellm_hub_store_errors_total{operation="` + op + `"} `
		if !strings.Contains(string(m.body), line) || strings.Contains(string(m.body), line+"0\n") {
			t.Errorf("no store error counted for %s: %s", op, m.body)
		}
	}

	fb.SetDown(false)
	if r := w.settle(a, s); r.status != 200 {
		t.Fatalf("settle after the outage: %d %s", r.status, r.body)
	}
	select {
	case r := <-done:
		if r.status != 200 || !strings.Contains(string(r.body), "ran:inflight") {
			t.Fatalf("in-flight exec: %d %s", r.status, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight exec never answered")
	}
	if r := get(t, h.srv.URL+"/readyz"); r.status != 200 {
		t.Fatalf("readyz after: %d %s", r.status, r.body)
	}
	if n := strings.Count(logs.String(), "store unavailable"); n != 1 {
		t.Fatalf("outage logged %d times:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "store reachable again") {
		t.Fatalf("recovery not logged:\n%s", logs)
	}
}

// A store that lost its data (here: its epoch and the worker's record are
// deleted underneath the hub) is detected: one clear log error, /readyz
// names it, and the worker is told STORE_RESET instead of a bare
// CREDENTIAL_INVALID; pairing again works.
func TestStoreReset(t *testing.T) {
	h, fb, logs := newFaultHub(t)
	w := newWorker(t, h, "reset-vm")
	w.pair(h)
	w.mustRegister()
	if r, _ := w.register(); r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	// Before any reset an unknown credential is CREDENTIAL_INVALID (the
	// differential of the STORE_RESET below).
	other := newWorker(t, h, "never-paired")
	other.credential = "not-a-credential-at-all-000000000000000000"
	if r, _ := other.register(); r.code() != bridge.CodeCredentialInvalid {
		t.Fatalf("unknown credential: %d %s", r.status, r.body)
	}
	wipe := func() {
		err := fb.Update(context.Background(), func(tx store.Txn) error {
			for _, k := range []string{"epoch", "{w:reset-vm}:rec", "{w:reset-vm}:reg"} {
				tx.Delete(k)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wipe()
	// First, while the hub still holds the worker's credential in its cache: a request dated before the
	// store's memory of nonces began (a store that lost its data forgot them with the credentials) reads
	// as a replay to the nonce check, which runs before the registration could find the credential gone;
	// the hub looks the credential up to say why.
	w.timestamp = func() time.Time { return time.Now().Add(-30 * time.Second) }
	if r, _ := w.register(); r.status != 401 || r.code() != bridge.CodeStoreReset {
		t.Fatalf("register dated before the reset: %d %s", r.status, r.body)
	}
	w.timestamp = nil
	for range 2 {
		r, _ := w.register()
		if r.status != 401 || r.code() != bridge.CodeStoreReset {
			t.Fatalf("register after the reset: %d %s", r.status, r.body)
		}
	}
	r := get(t, h.srv.URL+"/readyz")
	if r.status != 200 || !strings.Contains(string(r.body), `"store":"reset"`) || !strings.Contains(string(r.body), "pair each worker again") {
		t.Fatalf("readyz after the reset: %d %s", r.status, r.body)
	}
	if n := strings.Count(logs.String(), `level=ERROR msg="the hub's store lost its state`); n != 1 {
		t.Fatalf("reset logged %d times:\n%s", n, logs)
	}
	w.pair(h)
	if r, _ := w.register(); r.status != 200 {
		t.Fatalf("register after pairing again: %d %s", r.status, r.body)
	}
}

// The file routes over a Redis file store that cannot be reached answer 503
// store_unavailable with Retry-After too (they were a bare 500).
func TestFileStoreOutage(t *testing.T) {
	// Nothing listens on port 1: every Redis call fails at once.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	fs := filestore.NewRedis(rdb, "test:", filestore.Limits{})
	t.Cleanup(func() { _ = fs.Close(); _ = rdb.Close() })
	h := newTestHub(t, func(c *Config) { c.Files = fs })
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/v1/files/"+newSessionID(), nil)
	req.Header.Set("X-API-Key", apiKey)
	r := doHTTP(t, req)
	if r.status != 503 || !strings.Contains(string(r.body), `"error":"store_unavailable"`) || r.header.Get("Retry-After") != "1" {
		t.Fatalf("file list with the file store down: %d %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
}

// TestHealthFollowsStore: upstream's /v1/health (issue 40 item 7) answers 200 "OK" without a key while
// the store answers, and 503 while it is down.
func TestHealthFollowsStore(t *testing.T) {
	h, fb, _ := newFaultHub(t)
	if r := get(t, h.srv.URL+"/v1/health"); r.status != 200 || string(r.body) != "OK" {
		t.Fatalf("health: %d %s", r.status, r.body)
	}
	fb.SetDown(true)
	if r := get(t, h.srv.URL+"/v1/health"); r.status != 503 || string(r.body) != "Service Unavailable" {
		t.Fatalf("health during an outage: %d %s", r.status, r.body)
	}
	fb.SetDown(false)
	if r := get(t, h.srv.URL+"/v1/health"); r.status != 200 {
		t.Fatalf("health after: %d %s", r.status, r.body)
	}
}
