package egress

import (
	"bufio"
	"io"
	"net"
	"sync"
	"time"
)

// handle serves one client connection: SOCKS5 starts with version byte 5,
// anything else is HTTP.
func (s *Session) handle(c net.Conn) {
	cr := &capReader{r: c, n: maxHeader}
	br := bufio.NewReaderSize(cr, 4096)
	_ = c.SetReadDeadline(time.Now().Add(headerTimeout))
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 5 {
		s.socks(c, br, cr)
		return
	}
	s.http(c, br, cr)
}

// maxHeader bounds a request's head (request line and headers, or the
// SOCKS5 handshake) before it is relayed.
const maxHeader = 64 << 10

// capReader fails reads once n bytes have been read, until lifted.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

func (c *capReader) lift() { c.n = 1<<63 - 1 }

type headerError string

func (e headerError) Error() string { return string(e) }

const errHeaderTooLarge = headerError("request head larger than 64 KiB")

// relay copies both directions between the client (whose already-buffered
// bytes come from br) and the upstream until both ends are done or the
// run's byte cap is reached.
func (s *Session) relay(client net.Conn, br *bufio.Reader, up net.Conn, d dest) {
	var wg sync.WaitGroup
	var sent, recv int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		sent = s.copyCapped(up, br, client, up, d)
	}()
	go func() {
		defer wg.Done()
		recv = s.copyCapped(client, up, client, up, d)
	}()
	wg.Wait()
	s.finished(d, sent, recv)
}

// finished logs and counts what one allowed connection relayed.
func (s *Session) finished(d dest, sent, recv int64) {
	if m := s.p.cfg.Metrics; m != nil {
		m.Bytes("sent", sent)
		m.Bytes("received", recv)
	}
	s.p.cfg.Logger.Info("egress closed", "run", s.runID, "host", d.host, "port", d.port, "bytes_sent", sent, "bytes_received", recv)
}

const errByteLimit = headerError("the run's egress byte limit is reached")

// charge counts n bytes against the run's cap; false (logged and counted
// once per connection by the caller's refusal) when the cap is exceeded.
func (s *Session) charge(n int64, d dest) bool {
	if s.bytes.Add(n) <= s.p.cfg.MaxBytes {
		return true
	}
	s.p.cfg.Logger.Warn("egress byte limit reached", "run", s.runID, "host", d.host, "limit", s.p.cfg.MaxBytes)
	if m := s.p.cfg.Metrics; m != nil {
		m.Connection("refused", "byte_limit")
	}
	return false
}

// copyCapped copies src to dst counting against the run's byte cap; at
// EOF it half-closes dst, at the cap or on an error it closes both ends.
func (s *Session) copyCapped(dst io.Writer, src io.Reader, client, up net.Conn, d dest) int64 {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if !s.charge(int64(n), d) {
				_ = client.Close()
				_ = up.Close()
				return total
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = client.Close()
				_ = up.Close()
				return total
			}
			total += int64(n)
		}
		if rerr != nil {
			if rerr == io.EOF {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
					return total
				}
			}
			_ = client.Close()
			_ = up.Close()
			return total
		}
	}
}
