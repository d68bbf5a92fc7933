package httpguard

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits are a listener's timeouts and connection cap. Zero fields take the defaults below; a negative
// value switches that limit off (tests use it to show the attack the limit stops).
type Limits struct {
	ReadHeader time.Duration // the request line and headers (default 10 s)
	Body       time.Duration // the whole body, from the first header byte's handler on (default 60 s)
	Idle       time.Duration // a keep-alive connection between requests (default 120 s)
	MaxConns   int           // open connections; more are answered 503 and closed (default 512)
}

// Defaults of Limits.
const (
	DefaultReadHeader = 10 * time.Second
	DefaultBody       = 60 * time.Second
	DefaultIdle       = 120 * time.Second
	DefaultMaxConns   = 512
)

func (l Limits) withDefaults() Limits {
	pick := func(v, def time.Duration) time.Duration {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	l.ReadHeader = pick(l.ReadHeader, DefaultReadHeader)
	l.Body = pick(l.Body, DefaultBody)
	l.Idle = pick(l.Idle, DefaultIdle)
	switch {
	case l.MaxConns == 0:
		l.MaxConns = DefaultMaxConns
	case l.MaxConns < 0:
		l.MaxConns = 0
	}
	return l
}

// Server builds an http.Server for h with l's timeouts. There is deliberately no ReadTimeout or
// WriteTimeout: a run may stream for minutes, and net/http's ReadTimeout would also cancel a long
// handler's context through its background read. The body deadline is set per request instead and
// lifted once the body is consumed.
func (l Limits) Server(h http.Handler, log *slog.Logger) *http.Server {
	l = l.withDefaults()
	hs := &http.Server{
		Handler:           BodyDeadline(h, l.Body),
		ReadHeaderTimeout: l.ReadHeader,
		IdleTimeout:       l.Idle,
	}
	if log != nil {
		hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	}
	return hs
}

// Listener wraps a raw TCP listener with the connection cap and descriptor-exhaustion reporting. plain
// says the connections speak plain HTTP, so an over-cap connection gets a 503 before it is closed (a TLS
// listener wraps this one, and its over-cap connections are just closed).
func (l Limits) Listener(ln net.Listener, plain bool, log *slog.Logger) net.Listener {
	l = l.withDefaults()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ll := &limitListener{Listener: ln, plain: plain, log: log, max: l.MaxConns}
	if l.MaxConns > 0 {
		ll.sem = make(chan struct{}, l.MaxConns)
	}
	return ll
}

// BodyDeadline gives a request body d to arrive: a slow body can no longer hold a connection and its
// handler forever. The deadline is lifted when the body reaches its end, so long runs are unaffected.
func BodyDeadline(h http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// DescriptorExhausted reports whether err is the process (EMFILE) or system (ENFILE) running out of file
// descriptors, which must be reported as such and not as a sandbox failure.
func DescriptorExhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

type limitListener struct {
	net.Listener
	plain    bool
	log      *slog.Logger
	max      int
	sem      chan struct{}
	lastWarn atomic.Int64 // unix nanos of the last exhaustion/over-cap log line
	refused  atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if DescriptorExhausted(err) {
				l.warn("accept failed: the process is out of file descriptors (raise RLIMIT_NOFILE or lower --max-connections)",
					"err", err.Error())
			}
			return nil, err // net/http retries temporary errors (EMFILE, ENFILE) with a backoff
		}
		if l.sem == nil {
			return c, nil
		}
		select {
		case l.sem <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
		default:
			l.refuse(c)
		}
	}
}

// refuse answers an over-cap connection and closes it, without blocking the accept loop for long.
func (l *limitListener) refuse(c net.Conn) {
	n := l.refused.Add(1)
	l.warn("connection refused: connection limit reached", "max_connections", l.max, "refused_total", n)
	if l.plain {
		body := fmt.Sprintf(`{"error":{"message":"too many open connections (limit %d); retry later","type":"server_error","code":"connection_limit"}}`, l.max)
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"+
			"Connection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	c.Close()
}

// warn logs at most one line per second, so a flood cannot flood the log too.
func (l *limitListener) warn(msg string, attrs ...any) {
	now := time.Now().UnixNano()
	last := l.lastWarn.Load()
	if now-last < int64(time.Second) || !l.lastWarn.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn(msg, attrs...)
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
