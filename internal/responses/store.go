package responses

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/openai"
)

// Record is one stored response.
type Record struct {
	ID     string
	Req    *openai.ChatRequest // the request it answers (its settings are echoed, its items listed)
	State  openai.ResponseState
	Object []byte // State.Object(Req), kept rendered: what retrieve answers
	// History is the conversation a follow-up (previous_response_id) continues: the history this response
	// itself continued, its own input and its output, as messages (instructions are not carried over, as
	// in OpenAI's API).
	History []openai.Message
	cancel  context.CancelFunc // a running background response's run
}

// Store keeps the responses of the Responses API in memory, scoped by credential (one credential never
// sees another's), bounded in entries and bytes (oldest first out) and by a TTL. It is safe for
// concurrent use.
type Store struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int64
	ttl        time.Duration
	now        func() time.Time

	byKey map[string]*list.Element // scope + "\x00" + id → *entry
	order *list.List               // oldest first
	bytes int64
}

type entry struct {
	key     string
	rec     *Record
	size    int64
	expires time.Time
}

// StoreConfig bounds a Store. Zero values take the defaults (10000 entries, 64 MiB, 1 h).
type StoreConfig struct {
	MaxEntries int
	MaxBytes   int64
	TTL        time.Duration
	Now        func() time.Time // tests; time.Now by default
}

// NewStore returns an empty store.
func NewStore(c StoreConfig) *Store {
	if c.MaxEntries <= 0 {
		c.MaxEntries = 10000
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 64 << 20
	}
	if c.TTL <= 0 {
		c.TTL = time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Store{maxEntries: c.MaxEntries, maxBytes: c.MaxBytes, ttl: c.TTL, now: c.Now,
		byKey: map[string]*list.Element{}, order: list.New()}
}

func key(scope, id string) string { return scope + "\x00" + id }

// size estimates what a record holds: its rendered object, its items and its history.
func size(r *Record) int64 {
	n := int64(len(r.Object)) + 256
	if r.Req != nil && r.Req.Response != nil {
		for _, it := range r.Req.Response.Items {
			n += int64(len(it))
		}
	}
	for _, m := range r.History {
		n += int64(len(m.Text)+len(m.Role)+len(m.Name)) + 64
	}
	return n
}

// Put stores rec (replacing a record of the same id), renders its object, and evicts the oldest records
// over the bounds. A record larger than the whole byte bound is not kept.
func (s *Store) Put(scope string, rec *Record) {
	rec.Object = rec.State.Object(rec.Req)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(scope, rec.ID)
	if el, ok := s.byKey[k]; ok {
		s.remove(el)
	}
	e := &entry{key: k, rec: rec, size: size(rec), expires: s.now().Add(s.ttl)}
	if e.size > s.maxBytes {
		return
	}
	s.byKey[k] = s.order.PushBack(e)
	s.bytes += e.size
	for s.order.Len() > s.maxEntries || s.bytes > s.maxBytes {
		s.remove(s.order.Front())
	}
}

// Update applies change to the stored record under the lock and renders its object again; false when
// the record is gone (evicted, expired, deleted).
func (s *Store) Update(scope, id string, change func(*Record)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key(scope, id)]
	if !ok {
		return false
	}
	e := el.Value.(*entry)
	change(e.rec)
	e.rec.Object = e.rec.State.Object(e.rec.Req)
	s.bytes += size(e.rec) - e.size
	e.size = size(e.rec)
	return true
}

// Get returns a snapshot of the record (nil when there is none for this credential), dropping it when
// expired.
func (s *Store) Get(scope, id string) *Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key(scope, id)]
	if !ok {
		return nil
	}
	e := el.Value.(*entry)
	if s.now().After(e.expires) {
		s.remove(el)
		return nil
	}
	r := *e.rec
	return &r
}

// Delete removes the record, cancelling its run if it is a running background response; false when there
// was none.
func (s *Store) Delete(scope, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key(scope, id)]
	if !ok {
		return false
	}
	if c := el.Value.(*entry).rec.cancel; c != nil {
		c()
	}
	s.remove(el)
	return true
}

// remove drops an element (the lock is held).
func (s *Store) remove(el *list.Element) {
	e := el.Value.(*entry)
	s.order.Remove(el)
	delete(s.byKey, e.key)
	s.bytes -= e.size
}

// Len is the number of stored records (tests, metrics).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

// items renders a page of a record's input items (GET /v1/responses/{id}/input_items).
func items(rec *Record, order string, limit int, after string) []byte {
	all := rec.Req.Response.Items
	list := make([]json.RawMessage, 0, len(all))
	if order == "asc" {
		list = append(list, all...)
	} else {
		for i := len(all) - 1; i >= 0; i-- {
			list = append(list, all[i])
		}
	}
	if after != "" { // the page after the item of that id; an id not in the list has nothing after it
		rest := []json.RawMessage{}
		for i, it := range list {
			if itemID(it) == after {
				rest = list[i+1:]
				break
			}
		}
		list = rest
	}
	more := len(list) > limit
	if more {
		list = list[:limit]
	}
	page := map[string]any{"object": "list", "data": list, "has_more": more, "first_id": nil, "last_id": nil}
	if len(list) > 0 {
		page["first_id"], page["last_id"] = itemID(list[0]), itemID(list[len(list)-1])
	}
	return encode(page)
}

// encode is json.Marshal without HTML escaping (notes and code keep their bytes).
func encode(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // maps of strings and raw JSON: cannot fail
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func itemID(item json.RawMessage) string {
	var v struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(item, &v)
	return v.ID
}
