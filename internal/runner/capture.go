package runner

import (
	"bytes"
	"os"
	"sync"
	"time"
)

// capture collects a run's stdout and stderr from two pipes, capped per stream, and builds Piston's
// "output": both streams in the order codellm read them. Exact interleaving cannot be recovered from
// two pipes; chunks written with a scheduling point between them (a sleep, a blocking read, a flush
// followed by other work) come out in order, writes racing within microseconds may not.
type capture struct {
	mu       sync.Mutex
	max      int64
	streams  [2]bytes.Buffer // stdout, stderr
	over     [2]bool
	output   bytes.Buffer
	overflow chan struct{} // closed when either stream passes max
	once     sync.Once
	wg       sync.WaitGroup
	readers  [2]*os.File
}

func newCapture(max int64) *capture {
	return &capture{max: max, overflow: make(chan struct{})}
}

// start reads stdout and stderr until EOF (or until finish gives up on them).
func (c *capture) start(stdout, stderr *os.File) {
	c.readers = [2]*os.File{stdout, stderr}
	for i, f := range c.readers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					c.add(i, buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (c *capture) add(i int, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.streams[i]
	room := c.max - int64(s.Len())
	if int64(len(p)) > room {
		p = p[:max(room, 0)]
		if !c.over[i] {
			c.over[i] = true
			c.once.Do(func() { close(c.overflow) })
		}
	}
	s.Write(p)
	c.output.Write(p)
}

// finish waits for both readers to reach EOF. Once the run's processes are dead nothing should hold the
// pipes' write ends; if something escaped and does (only possible without a PID namespace), the reads
// are abandoned after grace so the reply is never held hostage.
func (c *capture) finish(grace time.Duration) {
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
		f.Close()
	}
}

func (c *capture) result() (stdout, stderr, output string, overStdout, overStderr bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[0].String(), c.streams[1].String(), c.output.String(), c.over[0], c.over[1]
}
