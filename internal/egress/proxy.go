package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [Config].
const (
	DefaultMaxConns    = 64
	DefaultMaxOpen     = 64
	DefaultMaxBytes    = 256 << 20
	DefaultDialTimeout = 10 * time.Second
	// headerTimeout bounds how long a client may take to say where it
	// wants to go; a tunnel then lives as long as the run.
	headerTimeout = 30 * time.Second
)

// Resolver is what the proxy resolves names with (net.Resolver has this
// method). Tests map their names to loopback servers with their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Metrics receives one call per decision and the bytes relayed; nil
// discards them.
type Metrics interface {
	Connection(decision, reason string)
	Bytes(direction string, n int64)
}

// Config is the operator's egress policy.
type Config struct {
	Policy   *Policy
	Resolver Resolver // default net.DefaultResolver
	MaxConns int      // outbound connections per run (default 64); negative: none
	// MaxOpen bounds the connections a run's blocks hold open to the proxy at once, whether or not they
	// ever dial (default 64; negative: none): each costs the server a descriptor, and ~2 000 idle ones
	// exhausted serve's (issue 35 item 4). One beyond it is closed at once.
	MaxOpen     int
	MaxBytes    int64         // bytes per run, both directions, request and response heads included (default 256 MiB)
	DialTimeout time.Duration // default 10s
	Logger      *slog.Logger
	Metrics     Metrics
}

// Proxy is the configured egress policy shared by every run.
type Proxy struct{ cfg Config }

// Limits are the effective per-run caps (outbound connections, bytes), defaults applied.
func (p *Proxy) Limits() (int, int64) { return p.cfg.MaxConns, p.cfg.MaxBytes }

// MaxOpen is the effective per-run cap on connections open to the proxy at once.
func (p *Proxy) MaxOpen() int { return p.cfg.MaxOpen }

// New validates cfg and fills in defaults.
func New(cfg Config) (*Proxy, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("%w: no policy", ErrPolicy)
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxOpen == 0 {
		cfg.MaxOpen = DefaultMaxOpen
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Proxy{cfg: cfg}, nil
}

// Policy is the operator's normalised list.
func (p *Proxy) Policy() *Policy { return p.cfg.Policy }

// Open starts the egress of one run. narrow nil means the operator's whole
// list; otherwise it must be a subset of it (see [Policy.Narrow]).
func (p *Proxy) Open(runID string, narrow []string) (*Session, error) {
	pol := p.cfg.Policy
	if narrow != nil {
		var err error
		if pol, err = pol.Narrow(narrow); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Session{p: p, pol: pol, runID: runID, ctx: ctx, cancel: cancel,
		conns: map[net.Conn]struct{}{}, lns: map[net.Listener]struct{}{}}, nil
}

// Session is the egress of one run: it serves the listeners of the run's
// blocks and enforces the run's caps.
type Session struct {
	p      *Proxy
	pol    *Policy
	runID  string
	ctx    context.Context
	cancel context.CancelFunc

	nconn    atomic.Int64
	bytes    atomic.Int64
	overOpen atomic.Bool // a connection beyond MaxOpen was refused (logged once per run)

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	lns    map[net.Listener]struct{}
	wg     sync.WaitGroup
}

// Policy is the run's effective list.
func (s *Session) Policy() *Policy { return s.pol }

// Serve accepts on l until l or the session is closed; it owns l.
func (s *Session) Serve(l net.Listener) {
	if !s.track(l) {
		_ = l.Close()
		return
	}
	defer s.wg.Done()
	defer s.untrack(l, nil)
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		ok, full := s.trackConn(c)
		if full {
			s.refuseOpen(c)
			continue
		}
		if !ok {
			_ = c.Close()
			return
		}
		go func() {
			defer s.wg.Done()
			defer s.untrack(nil, c)
			s.handle(c)
		}()
	}
}

// track registers a listener (and a wg slot) unless closed.
func (s *Session) track(l net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.lns[l] = struct{}{}
	s.wg.Add(1)
	return true
}

// trackConn is track for an accepted connection, refused (full) when the run already holds MaxOpen.
func (s *Session) trackConn(c net.Conn) (ok, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, false
	}
	if max := s.p.cfg.MaxOpen; max > 0 && len(s.conns) >= max {
		return false, true
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true, false
}

// refuseOpen closes a connection beyond MaxOpen at once; the first of a run is logged.
func (s *Session) refuseOpen(c net.Conn) {
	_ = c.Close()
	if m := s.p.cfg.Metrics; m != nil {
		m.Connection("refused", "open_limit")
	}
	if !s.overOpen.Swap(true) {
		s.p.cfg.Logger.Warn("egress refused", "run", s.runID, "decision", "refused", "reason", "open_limit",
			"error", fmt.Sprintf("the run holds %d connections to its egress proxy (--network-max-proxy-connections); further ones are closed at once", s.p.cfg.MaxOpen))
	}
}

func (s *Session) untrack(l net.Listener, c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l != nil {
		delete(s.lns, l)
		_ = l.Close()
	}
	if c != nil {
		delete(s.conns, c)
		_ = c.Close()
	}
}

// Close ends every listener and connection of the run and waits for their
// goroutines. It is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.cancel()
		for l := range s.lns {
			_ = l.Close()
		}
		for c := range s.conns {
			_ = c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// dest is what a client asked for.
type dest struct {
	proto string // connect, http, socks5
	host  string // as sent
	port  uint16
}

// refusal is a decision against a connection: reason is the stable metric
// label, msg the text for the log and the client.
type refusal struct{ reason, msg string }

func (r *refusal) Error() string { return r.msg }

func refuse(reason, format string, args ...any) *refusal {
	return &refusal{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// dial decides and, when allowed, connects to d: the only place that
// opens an outbound connection.
func (s *Session) dial(d dest) (net.Conn, error) {
	addrs, err := s.decide(d)
	if err != nil {
		return nil, err
	}
	if s.nconn.Add(1) > int64(s.p.cfg.MaxConns) && s.p.cfg.MaxConns > 0 {
		return nil, refuse("conn_limit", "run's connection limit of %d reached", s.p.cfg.MaxConns)
	}
	dl := net.Dialer{Timeout: s.p.cfg.DialTimeout}
	var last error
	for _, a := range addrs {
		c, err := dl.DialContext(s.ctx, "tcp", netip.AddrPortFrom(a, d.port).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, refuse("dial_failed", "connect to %s: %v", d.host, last)
}

// decide applies the policy to d and returns the checked addresses to dial.
func (s *Session) decide(d dest) ([]netip.Addr, error) {
	if d.port == 0 {
		return nil, refuse("bad_request", "destination %q has no port", d.host)
	}
	if a, err := netip.ParseAddr(trimBrackets(d.host)); err == nil {
		if !s.pol.AllowsAddr(a) {
			return nil, refuse("raw_ip", "raw IP destination %s is not allowed (name a host on the allow-list)", a)
		}
		return []netip.Addr{a.Unmap()}, nil
	}
	name, err := NormalizeName(d.host)
	if err != nil {
		return nil, refuse("invalid_name", "destination %q is not a valid host name", d.host)
	}
	if !s.pol.AllowsName(name) {
		return nil, refuse("not_allowed", "%s is not on the network allow-list", name)
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.p.cfg.DialTimeout)
	defer cancel()
	found, err := s.p.cfg.Resolver.LookupNetIP(ctx, "ip", name)
	if err != nil || len(found) == 0 {
		return nil, refuse("resolve_failed", "cannot resolve %s: %v", name, err)
	}
	var ok []netip.Addr
	why := ""
	for _, a := range found {
		a = a.Unmap()
		if r := Blocked(a); r != "" && !s.pol.AllowsAddr(a) {
			why = fmt.Sprintf("%s resolves to %s address %s", name, r, a)
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		return nil, refuse("private_address", "%s (not allowed unless an IP entry names it)", why)
	}
	return ok, nil
}

func trimBrackets(h string) string {
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		return h[1 : len(h)-1]
	}
	return h
}

// record logs and counts one decision.
func (s *Session) record(d dest, err error) {
	lg := s.p.cfg.Logger
	decision, reason := "allowed", "allowed"
	var r *refusal
	if errors.As(err, &r) {
		decision, reason = "refused", r.reason
	} else if err != nil {
		decision, reason = "refused", "bad_request"
	}
	attrs := []any{"run", s.runID, "proto", d.proto, "host", d.host, "port", d.port, "decision", decision, "reason", reason}
	if err != nil {
		lg.Warn("egress refused", append(attrs, "error", err.Error())...)
	} else {
		lg.Info("egress allowed", attrs...)
	}
	if m := s.p.cfg.Metrics; m != nil {
		m.Connection(decision, reason)
	}
}
