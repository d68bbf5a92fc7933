package idempotency

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The guard's own cost per request: a first run (claim, record, finish) and a replay, in memory.
func BenchmarkGuard(b *testing.B) {
	body := strings.Repeat("x", 4<<10)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	})
	fail := func(w http.ResponseWriter, status int, code, msg string) { w.WriteHeader(status) }
	g := &Guard{Store: NewMemory(MemoryConfig{MaxEntries: 1 << 20, MaxBytes: 1 << 40})}
	h := g.Wrap(ok, fail)
	req := func(key string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"messages":[]}`))
		r.Header.Set(HeaderKey, key)
		return r
	}
	b.Run("first", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			h.ServeHTTP(httptest.NewRecorder(), req(fmt.Sprint("f", i)))
		}
	})
	h.ServeHTTP(httptest.NewRecorder(), req("replay"))
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			h.ServeHTTP(httptest.NewRecorder(), req("replay"))
		}
	})
}
