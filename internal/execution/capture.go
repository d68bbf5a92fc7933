package execution

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// Caps bounds what a Capture keeps. A stream's cap of 0 keeps nothing of it; Shared > 0 replaces both
// per-stream caps with one budget that stdout and stderr draw from together.
type Caps struct {
	Stdout, Stderr int64
	Shared         int64
}

// Captured is what a Capture kept: each stream's head, both streams in the order codellm read them
// (exact interleaving cannot be recovered from two pipes), and whether each was cut at its cap (or by a
// read error).
type Captured struct {
	Stdout, Stderr, Output []byte
	StdoutCut, StderrCut   bool
}

// Capture reads a program's stdout and stderr to EOF, keeping what fits its Caps and draining the rest,
// so the program never blocks on a full pipe and memory stays bounded.
type Capture struct {
	caps     Caps
	mu       sync.Mutex
	streams  [2]bytes.Buffer
	cut      [2]bool
	output   bytes.Buffer
	shared   int64
	overflow chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	readers  [2]*os.File
}

// NewCapture returns a capture with caps.
func NewCapture(caps Caps) *Capture {
	return &Capture{caps: caps, shared: caps.Shared, overflow: make(chan struct{})}
}

// Start reads the two pipes' read ends until EOF (or until Finish gives up on them).
func (c *Capture) Start(stdout, stderr *os.File) {
	c.readers = [2]*os.File{stdout, stderr}
	for i, f := range c.readers {
		c.wg.Go(func() {
			buf := make([]byte, 64<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					c.add(i, buf[:n])
				}
				if err != nil {
					if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded) {
						c.markCut(i)
					}
					return
				}
			}
		})
	}
}

// Overflow is closed when either stream first passes its cap.
func (c *Capture) Overflow() <-chan struct{} { return c.overflow }

func (c *Capture) room(i int) int64 {
	if c.caps.Shared > 0 {
		return c.shared
	}
	return [2]int64{c.caps.Stdout, c.caps.Stderr}[i] - int64(c.streams[i].Len())
}

func (c *Capture) add(i int, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.room(i); int64(len(p)) > room {
		p = p[:max(room, 0)]
		c.cut[i] = true
		c.once.Do(func() { close(c.overflow) })
	}
	if c.caps.Shared > 0 {
		c.shared -= int64(len(p))
	}
	c.streams[i].Write(p)
	c.output.Write(p)
}

func (c *Capture) markCut(i int) {
	c.mu.Lock()
	c.cut[i] = true
	c.mu.Unlock()
}

// Finish waits for both readers to reach EOF, then closes the pipes. Once the program's processes are
// gone nothing should hold the write ends; if something escaped and does (only possible without a PID
// namespace), the reads are abandoned after grace so the caller is never held hostage.
func (c *Capture) Finish(grace time.Duration) {
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		for _, f := range c.readers {
			_ = f.SetReadDeadline(time.Now())
		}
		<-done
	}
	for _, f := range c.readers {
		_ = f.Close()
	}
}

// Result returns copies of what was kept.
func (c *Capture) Result() Captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Captured{Stdout: bytes.Clone(c.streams[0].Bytes()), Stderr: bytes.Clone(c.streams[1].Bytes()),
		Output: bytes.Clone(c.output.Bytes()), StdoutCut: c.cut[0], StderrCut: c.cut[1]}
}
