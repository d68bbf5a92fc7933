package hub

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
)

// The chat route on one hub (bolt store): a keyed repeat, streamed or not, replays without a second
// assignment; a retry marked X-Stainless-Retry-Count replays its first attempt; a 401 is not recorded;
// the same key with another body is refused. (Two replicas on one Redis: redisstore.)
func TestChatIdempotency(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "idem-chat")
	w.caps.Runtimes = append(w.caps.Runtimes, ChatRuntimeLabel)
	w.pair(h)
	w.mustRegister()
	var runs atomic.Int64
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		n := runs.Add(1)
		return fulfilled(a, w.incarnation, strings.Replace(completion, `"chatcmpl-1"`, `"chatcmpl-`+string(rune('0'+n))+`"`, 1))
	})
	defer stop()

	for _, body := range []string{
		`{"model":"codellm","messages":[{"role":"user","content":"a"}]}`,
		`{"model":"codellm","stream":true,"messages":[{"role":"user","content":"b"}]}`,
	} {
		before := runs.Load()
		r1 := h.client(t, "/v1/chat/completions", body, map[string]string{"Idempotency-Key": "k" + body})
		r2 := h.client(t, "/v1/chat/completions", body, map[string]string{"Idempotency-Key": "k" + body})
		if r1.status != 200 || r2.status != 200 || string(r1.body) != string(r2.body) || r2.header.Get("Idempotent-Replayed") != "true" ||
			r2.header.Get("Content-Type") != r1.header.Get("Content-Type") || runs.Load() != before+1 {
			t.Fatalf("first %d %s\nsecond %d %v %s\nruns %d", r1.status, r1.body, r2.status, r2.header, r2.body, runs.Load()-before)
		}
		if r3 := h.client(t, "/v1/chat/completions", body, nil); string(r3.body) == string(r1.body) || runs.Load() != before+2 {
			t.Fatalf("unkeyed repeat replayed: %s", r3.body)
		}
	}
	body := `{"messages":[{"role":"user","content":"c"}]}`
	first := h.client(t, "/v1/chat/completions", body, map[string]string{"X-Stainless-Retry-Count": "0"})
	retry := h.client(t, "/v1/chat/completions", body, map[string]string{"X-Stainless-Retry-Count": "1"})
	if string(first.body) != string(retry.body) || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("stainless retry: %s / %s", first.body, retry.body)
	}
	before := runs.Load()
	r := h.client(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"other"}]}`, map[string]string{"Idempotency-Key": "k" + body, "X-API-Key": apiKey})
	if r.status != 200 {
		t.Fatalf("fresh key: %d %s", r.status, r.body)
	}
	r = h.client(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, map[string]string{"Idempotency-Key": "k" + body})
	if r.status != 400 || !strings.Contains(string(r.body), `"code":"idempotency_key_reused"`) || runs.Load() != before+1 {
		t.Fatalf("reused key: %d %s", r.status, r.body)
	}
	r = h.client(t, "/v1/chat/completions", body, map[string]string{"Idempotency-Key": "unauth", "X-API-Key": "wrong"})
	if r.status != 401 {
		t.Fatalf("bad key: %d %s", r.status, r.body)
	}
	if r = h.client(t, "/v1/chat/completions", body, map[string]string{"Idempotency-Key": "unauth"}); r.status != 200 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("a 401 was recorded: %d %v", r.status, r.header)
	}
}

// The hub's records are bounded together: beyond IdempotencyMaxEntries the oldest finished record is
// deleted (and counted), so its key runs again, while the newest still replays.
func TestIdempotencyBound(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.IdempotencyMaxEntries = 2 })
	h.idem.Store.(*backendIdem).trimEvery = 0
	w := newWorker(t, h, "idem-bound")
	w.caps.Runtimes = append(w.caps.Runtimes, ChatRuntimeLabel)
	w.pair(h)
	w.mustRegister()
	var runs atomic.Int64
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		runs.Add(1)
		return fulfilled(a, w.incarnation, completion)
	})
	defer stop()
	body := `{"messages":[{"role":"user","content":"a"}]}`
	for _, k := range []string{"a", "b", "c"} {
		if r := h.client(t, "/v1/chat/completions", body, map[string]string{"Idempotency-Key": k}); r.status != 200 {
			t.Fatalf("%s: %d %s", k, r.status, r.body)
		}
	}
	if r := h.client(t, "/v1/chat/completions", body, map[string]string{"Idempotency-Key": "c"}); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the newest record was evicted")
	}
	if r := h.client(t, "/v1/chat/completions", body, map[string]string{"Idempotency-Key": "a"}); r.header.Get("Idempotent-Replayed") != "" || runs.Load() != 4 {
		t.Fatalf("the oldest record was kept (runs %d)", runs.Load())
	}
	members, err := h.store.Backend().Members(context.Background(), idemIndex)
	if err != nil || len(members) > 2 {
		t.Fatalf("index %v (%v)", members, err)
	}
}

// A hub record expires with CODELLM_HUB_IDEMPOTENCY_TTL (the store's clock): the key then runs again.
func TestIdempotencyTTL(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	h := newTestHub(t, func(c *Config) { c.IdempotencyTTL = 2 * time.Second }, boltstore.WithClock(clock))
	w := newWorker(t, h, "idem-ttl")
	w.caps.Runtimes = append(w.caps.Runtimes, ChatRuntimeLabel)
	w.pair(h)
	w.mustRegister()
	var runs atomic.Int64
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		runs.Add(1)
		return fulfilled(a, w.incarnation, completion)
	})
	defer stop()
	body := `{"messages":[{"role":"user","content":"ttl"}]}`
	key := map[string]string{"Idempotency-Key": "ttl"}
	h.client(t, "/v1/chat/completions", body, key)
	if r := h.client(t, "/v1/chat/completions", body, key); r.header.Get("Idempotent-Replayed") != "true" || runs.Load() != 1 {
		t.Fatalf("within the TTL: %d %v runs %d", r.status, r.header, runs.Load())
	}
	offset.Store(int64(3 * time.Second))
	if r := h.client(t, "/v1/chat/completions", body, key); r.status != 200 || r.header.Get("Idempotent-Replayed") != "" || runs.Load() != 2 {
		t.Fatalf("after the TTL: %d %v %s runs %d", r.status, r.header, r.body, runs.Load())
	}
}
