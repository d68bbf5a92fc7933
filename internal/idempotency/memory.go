package idempotency

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// Memory is the in-memory Store of `codellm serve`: bounded in entries and bytes, oldest finished entry
// out first (counted as EventEvicted), expired entries dropped lazily. Pending claims are never evicted:
// they are bounded by the run concurrency and removed by Finish or Release.
type Memory struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int64
	now        func() time.Time
	onEvent    func(string)

	byKey map[string]*list.Element // of *memEntry
	order *list.List               // finished entries oldest first, then by Finish time
	bytes int64                    // of finished entries
}

type memEntry struct {
	key     string
	entry   Entry
	size    int64
	expires time.Time     // finished entries; pending ones: the claim's own bound
	done    chan struct{} // closed when the pending claim finishes or is released
}

// MemoryConfig bounds a Memory store. Zero values take the defaults (10000 entries, 64 MiB).
type MemoryConfig struct {
	MaxEntries int
	MaxBytes   int64
	Now        func() time.Time // tests; time.Now by default
	OnEvent    func(event string)
}

// NewMemory returns an empty bounded store.
func NewMemory(c MemoryConfig) *Memory {
	if c.MaxEntries <= 0 {
		c.MaxEntries = 10000
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 64 << 20
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.OnEvent == nil {
		c.OnEvent = func(string) {}
	}
	return &Memory{maxEntries: c.MaxEntries, maxBytes: c.MaxBytes, now: c.Now, onEvent: c.OnEvent,
		byKey: map[string]*list.Element{}, order: list.New()}
}

// Claim implements Store.
func (m *Memory) Claim(_ context.Context, key, fp string, pending time.Duration) (*Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.expire(now)
	if el, ok := m.byKey[key]; ok {
		e := el.Value.(*memEntry)
		if now.Before(e.expires) {
			cp := e.entry
			return &cp, nil
		}
		m.remove(el)
	}
	e := &memEntry{key: key, entry: Entry{Fingerprint: fp}, expires: now.Add(pending), done: make(chan struct{})}
	m.byKey[key] = m.order.PushBack(e)
	return nil, nil
}

// Finish implements Store. A response larger than the whole byte bound is kept as a TooLarge marker.
func (m *Memory) Finish(_ context.Context, key string, resp *Response, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.byKey[key]
	if !ok || el.Value.(*memEntry).entry.Done {
		return nil // the claim expired meanwhile; nothing to record
	}
	e := el.Value.(*memEntry)
	size := int64(len(key)+len(e.entry.Fingerprint)+len(resp.Body)) + headerSize(resp.Header) + 128
	if size > m.maxBytes {
		resp = &Response{Status: resp.Status, TooLarge: true}
		size = int64(len(key)+len(e.entry.Fingerprint)) + 128
		m.onEvent(EventTooLarge)
	}
	e.entry.Done, e.entry.Response, e.size, e.expires = true, resp, size, m.now().Add(ttl)
	m.bytes += size
	m.order.MoveToBack(el)
	close(e.done)
	m.onEvent(EventRecorded)
	m.evict()
	return nil
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byKey[key]; ok && !el.Value.(*memEntry).entry.Done {
		m.remove(el)
	}
	return nil
}

// Wait implements Store.
func (m *Memory) Wait(ctx context.Context, key string) (*Entry, error) {
	m.mu.Lock()
	el, ok := m.byKey[key]
	if !ok {
		m.mu.Unlock()
		return nil, nil
	}
	e := el.Value.(*memEntry)
	m.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !e.entry.Done {
		return nil, nil // released
	}
	cp := e.entry
	return &cp, nil
}

// Len reports the number of entries (pending and finished) and the bytes of the finished ones.
func (m *Memory) Len() (int, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byKey), m.bytes
}

// expire drops expired entries from the front; pending entries are skipped, not dropped, unless their
// own claim bound passed.
func (m *Memory) expire(now time.Time) {
	for el := m.order.Front(); el != nil; {
		next := el.Next()
		e := el.Value.(*memEntry)
		if !now.Before(e.expires) {
			m.remove(el)
		} else if e.entry.Done {
			return // finished entries are in expiry order: the rest is younger
		}
		el = next
	}
}

// evict pushes the oldest finished entries out until both bounds hold.
func (m *Memory) evict() {
	for el := m.order.Front(); el != nil && (len(m.byKey) > m.maxEntries || m.bytes > m.maxBytes); {
		next := el.Next()
		if el.Value.(*memEntry).entry.Done {
			m.remove(el)
			m.onEvent(EventEvicted)
		}
		el = next
	}
}

func (m *Memory) remove(el *list.Element) {
	e := el.Value.(*memEntry)
	m.order.Remove(el)
	delete(m.byKey, e.key)
	if e.entry.Done {
		m.bytes -= e.size
	} else {
		close(e.done) // wake waiters: the claim is gone
	}
}

func headerSize(h map[string][]string) int64 {
	var n int64
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}
