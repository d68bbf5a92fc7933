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
// least recently used session idle for EvictIdle; another credential still gets sessions; a busy one is
// never evicted.
func TestSessionsPerCredential(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.MaxSessions, c.MaxSessionsPerOwner, c.EvictIdle = 10, 2, time.Nanosecond })
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

// Callers that share one credential (LibreChat sends every user's requests with its one API key) are one
// owner: a burst of new sessions at that owner's cap must not evict another user's session that is in use
// (issue 35 item 16: 32 new sessions evicted one idle for a second). At the cap only a session idle for
// EvictIdle goes; otherwise the newcomer gets 429 naming the limit, and the other user's files stay.
func TestSharedCredentialKeepsAnActiveSession(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.MaxSessions, c.MaxSessionsPerOwner, c.EvictIdle = 10, 3, time.Hour })
	shared := map[string]string{"Authorization": "Bearer one-key-for-every-user"}
	as := func(sid, src string) (int, map[string]any) {
		hdr := map[string]string{wire.RuntimeSessionHeader: sid}
		for k, v := range shared {
			hdr[k] = v
		}
		status, body, _ := tr.do(http.MethodPost, PathExecute, code("bash", src), hdr)
		return status, body
	}
	if st, b := as("alice", "echo mine > notes.txt"); st != 200 {
		t.Fatalf("alice: %d %v", st, b)
	}
	for _, sid := range []string{"bob-1", "bob-2"} {
		if st, b := as(sid, "true"); st != 200 {
			t.Fatalf("%s: %d %v", sid, st, b)
		}
	}
	st, b := as("bob-3", "true")
	if msg, _ := b["message"].(string); st != 429 || !strings.Contains(msg, "at most 3 per credential") || !strings.Contains(msg, "none idle for 1h0m0s") {
		t.Errorf("a new session at the shared cap: %d %v, want 429 naming the per-credential limit", st, b)
	}
	st, b = as("alice", "cat notes.txt")
	if run, _ := b["run"].(map[string]any); st != 200 || run["stdout"] != "mine\n" {
		t.Fatalf("alice's session after bob's burst: %d %v, want her file (it was evicted)", st, b)
	}
}
