package responses

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/openai"
)

func record(t *testing.T, id, input string) *Record {
	t.Helper()
	req, e := openai.DecodeResponsesRequest([]byte(fmt.Sprintf(`{"input":%q}`, input)))
	if e != nil {
		t.Fatal(e)
	}
	return &Record{ID: id, Req: req, State: openai.ResponseState{ID: id, Status: openai.StatusCompleted}}
}

// Records are found only by the credential that stored them; the oldest go first over the entry and byte
// bounds; an expired one is gone; one larger than the whole byte bound is not kept.
func TestStoreBoundsAndScope(t *testing.T) {
	now := time.Unix(1000, 0)
	s := NewStore(StoreConfig{MaxEntries: 3, MaxBytes: 8 << 10, TTL: time.Minute, Now: func() time.Time { return now }})
	for i := range 4 {
		s.Put("alice", record(t, fmt.Sprint("resp_", i), "x"))
	}
	if s.Len() != 3 || s.Get("alice", "resp_0") != nil || s.Get("alice", "resp_3") == nil || s.Get("bob", "resp_3") != nil {
		t.Fatalf("entries bound or scope: %d", s.Len())
	}
	s.Put("bob", record(t, "resp_big", strings.Repeat("y", 5<<10)))
	s.Put("bob", record(t, "resp_big2", strings.Repeat("y", 5<<10)))
	if s.Get("bob", "resp_big") != nil || s.Get("bob", "resp_big2") == nil || s.bytes > 8<<10 {
		t.Fatalf("bytes bound: %d bytes", s.bytes)
	}
	s.Put("bob", record(t, "resp_huge", strings.Repeat("z", 9<<10)))
	if s.Get("bob", "resp_huge") != nil {
		t.Fatal("a record larger than the byte bound was kept")
	}
	if s.Get("alice", "resp_3") != nil {
		t.Fatal("the oldest records did not make room (alice's came first)")
	}
	now = now.Add(2 * time.Minute)
	if s.Get("bob", "resp_big2") != nil {
		t.Fatal("an expired record was returned")
	}
}

// Update renders the object again; Delete cancels a running background run.
func TestStoreUpdateDelete(t *testing.T) {
	s := NewStore(StoreConfig{})
	rec := record(t, "resp_1", "x")
	cancelled := false
	rec.cancel = func() { cancelled = true }
	rec.State.Status = openai.StatusInProgress
	s.Put("a", rec)
	s.Update("a", "resp_1", func(r *Record) { r.State.Status = openai.StatusCancelled })
	if got := s.Get("a", "resp_1"); got == nil || !strings.Contains(string(got.Object), `"status":"cancelled"`) {
		t.Fatalf("%+v", got)
	}
	if !s.Delete("a", "resp_1") || !cancelled || s.Delete("a", "resp_1") || s.Update("a", "resp_1", func(*Record) {}) {
		t.Fatal("delete")
	}
}
