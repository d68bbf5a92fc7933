package runner

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/wire"
)

// TestSessionTableExhaustion (red-team item 6): 64 sessions created in 0.8 s locked every new session ID
// out with 429 for the whole 30-minute TTL. Without eviction (EvictIdle longer than the test) a full table
// still refuses a newcomer — the attack; with it, the least recently used idle session makes room.
func TestSessionTableExhaustion(t *testing.T) {
	for _, evict := range []bool{false, true} {
		tr := newRunner(t, func(c *Config) {
			c.MaxSessions, c.MaxSessionsPerOwner = 3, 3
			c.EvictIdle = time.Hour
			if evict {
				c.EvictIdle = time.Nanosecond
			}
		})
		for _, id := range []string{"flood-1", "flood-2", "flood-3"} {
			tr.exec(id, code("bash", "true"))
		}
		status, body, _ := tr.do(http.MethodPost, PathExecute, code("bash", "echo hi"), map[string]string{wire.RuntimeSessionHeader: "victim"})
		if !evict {
			if msg, _ := body["message"].(string); status != 429 || !strings.Contains(msg, "none idle for 1h0m0s") {
				t.Fatalf("without eviction the full table should lock the newcomer out: %d %v", status, body)
			}
			continue
		}
		if status != 200 {
			t.Fatalf("with eviction the newcomer should get a session: %d %v", status, body)
		}
		if _, ok := tr.sessions["flood-1"]; ok || tr.Sessions() != 3 {
			t.Fatalf("the least recently used session should have been evicted: %d sessions", tr.Sessions())
		}
	}
}

// TestSessionsPerCredential: one credential cannot take the whole table. At its cap it replaces its own
// least recently used idle session; another credential still gets sessions; a busy one is never evicted.
func TestSessionsPerCredential(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.MaxSessions, c.MaxSessionsPerOwner, c.EvictIdle = 10, 2, time.Hour })
	as := func(key, sid string) (int, map[string]any) {
		status, body, _ := tr.do(http.MethodPost, PathExecute, code("bash", "true"),
			map[string]string{wire.RuntimeSessionHeader: sid, "Authorization": "Bearer " + key})
		return status, body
	}
	for _, sid := range []string{"m1", "m2", "m3"} {
		if st, b := as("mallory", sid); st != 200 {
			t.Fatalf("%s: %d %v", sid, st, b)
		}
	}
	if _, ok := tr.sessions["m1"]; ok {
		t.Fatal("mallory's third session should have replaced her first")
	}
	if st, b := as("alice", "a1"); st != 200 || tr.Sessions() != 3 {
		t.Fatalf("another credential: %d %v (%d sessions)", st, b, tr.Sessions())
	}
	// Both of mallory's sessions busy: her next one is refused with the per-credential limit named.
	tr.mu.Lock()
	for _, s := range tr.sessions {
		if s.id != "a1" {
			s.busy = true
		}
	}
	tr.mu.Unlock()
	st, b := as("mallory", "m4")
	tr.mu.Lock()
	for _, s := range tr.sessions {
		s.busy = false
	}
	tr.mu.Unlock()
	if msg, _ := b["message"].(string); st != 429 || !strings.Contains(msg, "at most 2 per credential") {
		t.Fatalf("busy sessions at the cap: %d %v", st, b)
	}
}
