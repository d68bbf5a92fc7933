package idempotency

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEventsMatchMetrics(t *testing.T) {
	if !slices.Equal(Events, metrics.IdempotencyEvents) {
		t.Fatalf("idempotency.Events %v != metrics.IdempotencyEvents %v", Events, metrics.IdempotencyEvents)
	}
}

// app is a handler that counts its runs and answers with the run number, so a second run is visible.
type app struct {
	runs    atomic.Int64
	status  atomic.Int64  // 0: 200
	release chan struct{} // when non-nil, each run waits for it
	stream  bool
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := a.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	if a.release != nil {
		select {
		case <-a.release:
		case <-r.Context().Done():
			return // cancelled: writes nothing
		}
	}
	st := int(a.status.Load())
	if st == 0 {
		st = 200
	}
	if a.stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(st)
		fmt.Fprintf(w, "data: {\"run\":%d}\n\n", n)
		w.(http.Flusher).Flush()
		fmt.Fprintf(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st)
	fmt.Fprintf(w, `{"run":%d,"body":%q}`, n, body)
}

type harness struct {
	app    *app
	store  *Memory
	srv    *httptest.Server
	events sync.Map // event → *atomic.Int64
	now    atomic.Int64
}

func newHarness(t *testing.T, mc MemoryConfig, tune func(*Guard)) *harness {
	t.Helper()
	h := &harness{app: &app{}}
	h.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	mc.Now = func() time.Time { return time.Unix(0, h.now.Load()) }
	mc.OnEvent = h.count
	h.store = NewMemory(mc)
	g := &Guard{Store: h.store, TTL: time.Minute, OnEvent: h.count,
		Credential: func(r *http.Request) string { return r.Header.Get("Authorization") },
		Detach: func(r *http.Request) (context.Context, context.CancelFunc) {
			return context.WithCancel(context.WithoutCancel(r.Context()))
		}}
	if tune != nil {
		tune(g)
	}
	fail := func(w http.ResponseWriter, status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`, code, msg)
	}
	h.srv = httptest.NewServer(g.Wrap(h.app, fail))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *harness) count(e string) {
	v, _ := h.events.LoadOrStore(e, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

func (h *harness) n(e string) int64 {
	v, ok := h.events.Load(e)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (h *harness) advance(d time.Duration) { h.now.Add(int64(d)) }

type reply struct {
	status   int
	body     string
	replayed bool
	ctype    string
}

func (h *harness) post(t *testing.T, body string, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/x", strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b), resp.Header.Get(HeaderReplayed) == "true", resp.Header.Get("Content-Type")}
}

func TestReplaySuccessAndFailure(t *testing.T) {
	for _, status := range []int{200, 422, 500} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			h := newHarness(t, MemoryConfig{}, nil)
			h.app.status.Store(int64(status))
			first := h.post(t, `{"a":1}`, HeaderKey, "k1")
			second := h.post(t, `{"a":1}`, HeaderKey, "k1")
			if first.status != status || first.replayed || second.status != status || !second.replayed ||
				second.body != first.body || second.ctype != "application/json" || h.app.runs.Load() != 1 {
				t.Fatalf("first %+v second %+v runs %d", first, second, h.app.runs.Load())
			}
			// Without the guard's key a second run answers differently: the replay is not a coincidence.
			if third := h.post(t, `{"a":1}`); third.body == first.body || h.app.runs.Load() != 2 {
				t.Fatalf("unkeyed request: %+v", third)
			}
			if h.n(EventRecorded) != 1 || h.n(EventReplayed) != 1 {
				t.Errorf("events recorded %d replayed %d", h.n(EventRecorded), h.n(EventReplayed))
			}
		})
	}
}

func TestReplayStream(t *testing.T) {
	h := newHarness(t, MemoryConfig{}, nil)
	h.app.stream = true
	first := h.post(t, `{}`, HeaderKey, "s")
	second := h.post(t, `{}`, HeaderKey, "s")
	if first.body != "data: {\"run\":1}\n\ndata: [DONE]\n\n" || second.body != first.body || !second.replayed ||
		second.ctype != "text/event-stream" || h.app.runs.Load() != 1 {
		t.Fatalf("first %+v second %+v", first, second)
	}
}

func TestInFlightWaiters(t *testing.T) {
	h := newHarness(t, MemoryConfig{}, nil)
	h.app.release = make(chan struct{})
	const n = 6
	replies := make(chan reply, n)
	for range n {
		go func() { replies <- h.post(t, `{"x":1}`, HeaderKey, "same") }()
	}
	// Wait until the first runs and the others wait on it.
	for h.app.runs.Load() != 1 || h.n(EventAttached) != n-1 {
		time.Sleep(5 * time.Millisecond)
	}
	close(h.app.release)
	var got []reply
	for range n {
		got = append(got, <-replies)
	}
	replayed := 0
	for _, r := range got {
		if r.body != got[0].body || r.status != 200 {
			t.Fatalf("different replies %+v", got)
		}
		if r.replayed {
			replayed++
		}
	}
	if h.app.runs.Load() != 1 || replayed != n-1 {
		t.Fatalf("runs %d, replayed %d", h.app.runs.Load(), replayed)
	}
}

func TestKeyReuseWithAnotherBody(t *testing.T) {
	h := newHarness(t, MemoryConfig{}, nil)
	h.post(t, `{"a":1}`, HeaderKey, "k")
	r := h.post(t, `{"a":2}`, HeaderKey, "k")
	if r.status != 400 || !strings.Contains(r.body, "idempotency_key_reused") || h.app.runs.Load() != 1 {
		t.Fatalf("reuse: %+v runs %d", r, h.app.runs.Load())
	}
	// Another credential has its own keys.
	if r := h.post(t, `{"a":2}`, HeaderKey, "k", "Authorization", "Bearer other"); r.status != 200 || r.replayed {
		t.Fatalf("other credential: %+v", r)
	}
	if h.app.runs.Load() != 2 || h.n(EventMismatch) != 1 {
		t.Fatalf("runs %d mismatches %d", h.app.runs.Load(), h.n(EventMismatch))
	}
	for _, bad := range []string{strings.Repeat("k", 256), "a\tb", "é"} {
		if r := h.post(t, `{}`, HeaderKey, bad); r.status != 400 || !strings.Contains(r.body, "invalid_idempotency_key") {
			t.Errorf("key %q: %+v", bad, r)
		}
	}
	if h.app.runs.Load() != 2 {
		t.Fatal("an invalid key ran")
	}
}

func TestTTLExpiry(t *testing.T) {
	h := newHarness(t, MemoryConfig{}, nil)
	a := h.post(t, `{}`, HeaderKey, "t")
	h.advance(59 * time.Second)
	if b := h.post(t, `{}`, HeaderKey, "t"); !b.replayed || b.body != a.body {
		t.Fatalf("within the TTL: %+v", b)
	}
	h.advance(2 * time.Second)
	if c := h.post(t, `{}`, HeaderKey, "t"); c.replayed || c.body == a.body || h.app.runs.Load() != 2 {
		t.Fatalf("after the TTL: %+v", c)
	}
	if n, _ := h.store.Len(); n != 1 {
		t.Fatalf("%d entries after expiry, want 1", n)
	}
}

func TestBound(t *testing.T) {
	h := newHarness(t, MemoryConfig{MaxEntries: 2}, nil)
	for _, k := range []string{"a", "b", "c"} {
		h.post(t, `{}`, HeaderKey, k)
	}
	if n, _ := h.store.Len(); n != 2 || h.n(EventEvicted) != 1 {
		t.Fatalf("entries %d evicted %d", n, h.n(EventEvicted))
	}
	if r := h.post(t, `{}`, HeaderKey, "c"); !r.replayed {
		t.Fatal("the newest entry was evicted")
	}
	if r := h.post(t, `{}`, HeaderKey, "a"); r.replayed || h.app.runs.Load() != 4 {
		t.Fatal("the oldest entry was kept")
	}

	// Bytes: each reply is ~40 bytes + overhead; a 600-byte bound keeps only a few.
	h = newHarness(t, MemoryConfig{MaxBytes: 600}, nil)
	for i := range 10 {
		h.post(t, fmt.Sprintf(`{"i":%d}`, i), HeaderKey, fmt.Sprint(i))
	}
	n, b := h.store.Len()
	if b > 600 || n >= 10 || n == 0 || h.n(EventEvicted) != int64(10-n) {
		t.Fatalf("entries %d bytes %d evicted %d", n, b, h.n(EventEvicted))
	}
	// A reply larger than the whole bound ran once and is refused, not run again.
	big := strings.Repeat("x", 1000)
	h.post(t, big, HeaderKey, "big")
	runs := h.app.runs.Load()
	if r := h.post(t, big, HeaderKey, "big"); r.status != 409 || !strings.Contains(r.body, "too_large") || h.app.runs.Load() != runs {
		t.Fatalf("too large: %+v", r)
	}
}

func TestNothingRanIsNotRecorded(t *testing.T) {
	h := newHarness(t, MemoryConfig{}, nil)
	h.app.status.Store(429)
	if r := h.post(t, `{}`, HeaderKey, "busy"); r.status != 429 {
		t.Fatal(r)
	}
	h.app.status.Store(200)
	if r := h.post(t, `{}`, HeaderKey, "busy"); r.status != 200 || r.replayed || h.app.runs.Load() != 2 {
		t.Fatalf("after a 429 the retry must run: %+v", r)
	}
	if h.n(EventReleased) != 1 {
		t.Errorf("released %d", h.n(EventReleased))
	}
}

func TestStainlessRetry(t *testing.T) {
	h := newHarness(t, MemoryConfig{}, nil)
	first := h.post(t, `{"q":1}`, HeaderRetryCount, "0")
	retry := h.post(t, `{"q":1}`, HeaderRetryCount, "1")
	if !retry.replayed || retry.body != first.body || h.app.runs.Load() != 1 {
		t.Fatalf("retry: %+v", retry)
	}
	// A new first attempt of the same body is a new request: it runs.
	if again := h.post(t, `{"q":1}`, HeaderRetryCount, "0"); again.replayed || h.app.runs.Load() != 2 {
		t.Fatalf("new attempt: %+v", again)
	}
	// A retry of another body, or from another credential, runs.
	h.post(t, `{"q":2}`, HeaderRetryCount, "2")
	h.post(t, `{"q":1}`, HeaderRetryCount, "1", "Authorization", "Bearer b")
	if h.app.runs.Load() != 4 {
		t.Fatalf("runs %d, want 4", h.app.runs.Load())
	}
}

// The client gives up (its own timeout) while the run goes on; its retry attaches to the same run and
// gets its answer, and the code ran once.
func TestClientTimeoutRetryRunsOnce(t *testing.T) {
	h := newHarness(t, MemoryConfig{}, nil)
	h.app.release = make(chan struct{})
	h.giveUp(t, `{}`, func() bool { return h.app.runs.Load() == 1 })
	done := make(chan reply, 1)
	go func() { done <- h.post(t, `{}`, HeaderRetryCount, "1") }()
	for h.n(EventAttached) != 1 {
		time.Sleep(5 * time.Millisecond)
	}
	close(h.app.release)
	r := <-done
	if r.status != 200 || !r.replayed || !strings.Contains(r.body, `"run":1`) || h.app.runs.Load() != 1 {
		t.Fatalf("retry %+v runs %d", r, h.app.runs.Load())
	}
}

// LangChain retries around the SDK on its own timeout: every attempt says X-Stainless-Retry-Count: 0. An
// attempt that finds the identical request still running attaches to it; one that comes after the run
// finished for clients that had all gone away gets that answer. The code ran once.
func TestFirstAttemptRetriesAttach(t *testing.T) {
	h := newHarness(t, MemoryConfig{}, nil)
	h.app.release = make(chan struct{})
	released := false
	t.Cleanup(func() { // before the server closes: a failed check must not leave a run waiting
		if !released {
			close(h.app.release)
		}
	})
	h.giveUp(t, `{"q":1}`, func() bool { return h.app.runs.Load() == 1 })
	h.giveUp(t, `{"q":1}`, func() bool { return h.n(EventAttached) == 1 }) // attached, not run
	close(h.app.release)
	released = true
	poll(t, func() bool { return h.n(EventRecorded) == 1 })
	third := h.post(t, `{"q":1}`, HeaderRetryCount, "0")
	if third.status != 200 || !third.replayed || !strings.Contains(third.body, `"run":1`) || h.app.runs.Load() != 1 {
		t.Fatalf("third attempt %+v, runs %d", third, h.app.runs.Load())
	}
	// Another credential's identical first attempt runs: the rule never crosses credentials.
	if other := h.post(t, `{"q":1}`, HeaderRetryCount, "0", "Authorization", "Bearer b"); other.replayed || h.app.runs.Load() != 2 {
		t.Fatalf("other credential %+v", other)
	}
}

// giveUp sends body as a Stainless first attempt and cancels it (the client's own timeout) once ready
// holds.
func (h *harness) giveUp(t *testing.T, body string, ready func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+"/v1/x", strings.NewReader(body))
	req.Header.Set(HeaderRetryCount, "0")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	poll(t, ready)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the attempt was not cancelled")
	}
}

// poll waits for cond; it detects hangs, it does not measure speed.
func poll(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
	}
}
