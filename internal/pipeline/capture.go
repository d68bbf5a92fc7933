package pipeline

import (
	"fmt"
	"os"
	"sync"
)

// readChunk is the read size of every parent-side pipe reader: the Linux default pipe capacity, so one
// read usually empties the pipe.
const readChunk = 64 << 10

// headBuffer keeps the first max bytes written to it and remembers whether more arrived. It backs the
// captured stdout of the last block and the edge taps, where the head is what a client can parse.
type headBuffer struct {
	mu        sync.Mutex
	max       int64
	buf       []byte
	total     int64
	truncated bool
}

// add records p and reports whether this call pushed the total over max for the first time.
func (h *headBuffer) add(p []byte) (overflowNow bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += int64(len(p))
	if room := h.max - int64(len(h.buf)); room > 0 {
		if int64(len(p)) > room {
			h.buf = append(h.buf, p[:room]...)
		} else {
			h.buf = append(h.buf, p...)
		}
	}
	if h.total > h.max && !h.truncated {
		h.truncated = true
		return true
	}
	return false
}

func (h *headBuffer) snapshot() ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]byte(nil), h.buf...), h.truncated
}

// tailBuffer keeps the last max bytes written to it (stderr, §6): the end of stderr is where the error is.
// It holds at most 2*max bytes and compacts amortised, so draining a block that writes gigabytes to stderr
// costs memory proportional to the cap only.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	buf   []byte
	total int64
}

func (t *tailBuffer) add(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		n := copy(t.buf, t.buf[len(t.buf)-t.max:])
		t.buf = t.buf[:n]
	}
}

// bytes returns the kept tail, prefixed with the §6 drop marker when bytes were dropped.
func (t *tailBuffer) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.buf
	if len(kept) > t.max {
		kept = kept[len(kept)-t.max:]
	}
	dropped := t.total - int64(len(kept))
	if dropped == 0 {
		return append([]byte(nil), kept...)
	}
	out := fmt.Appendf(nil, "[codellm: %d bytes of stderr dropped]\n", dropped)
	return append(out, kept...)
}

// drainTail reads f to EOF (or until f is closed under it) into t, then closes f. Draining past the cap
// is the point: a block must never stall on a full stderr pipe.
func drainTail(f *os.File, t *tailBuffer) {
	buf := make([]byte, readChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			t.add(buf[:n])
		}
		if err != nil {
			break
		}
	}
	_ = f.Close()
}

// captureHead reads f to EOF into h, calling overflow once when the cap is first exceeded, and keeps
// draining (discarding) afterwards so that whatever still holds the write end cannot block on it.
func captureHead(f *os.File, h *headBuffer, overflow func()) {
	buf := make([]byte, readChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 && h.add(buf[:n]) && overflow != nil {
			overflow()
		}
		if err != nil {
			break
		}
	}
	_ = f.Close()
}

// copyTap joins the two pipes of a tapped edge: it reads what the upstream block writes and writes it to
// the downstream block's stdin, recording every byte that was actually delivered. On upstream EOF it
// closes the downstream write end (the downstream reads EOF); when a downstream write fails (the
// downstream is gone) it closes the upstream read end at once (the upstream's next write gets EPIPE), so
// a tapped edge behaves like a single pipe apart from one extra pipe buffer in flight.
func copyTap(up, down *os.File, h *headBuffer) {
	buf := make([]byte, readChunk)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			m, werr := down.Write(buf[:n])
			if m > 0 {
				h.add(buf[:m])
			}
			if werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = up.Close()
	_ = down.Close()
}

// feed writes data to the first block's stdin and closes it; a block that exits without reading makes
// the write fail with EPIPE (the Go runtime returns EPIPE rather than raising SIGPIPE for such pipes).
func feed(f *os.File, data []byte) {
	_, _ = f.Write(data)
	_ = f.Close()
}
