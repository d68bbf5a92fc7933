package hub

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"sync"
)

// The hub's listener serves two kinds of callers: workers, which keep a long poll open per lease slot, and
// clients. Each kind has its own connection cap (Config.MaxWorkerConnections, MaxClientConnections), so
// that a fleet at its size cannot lock clients out and a client flood cannot disconnect workers. A
// connection belongs to neither until its first authenticated request puts it in its kind (or, with that
// kind full, is answered 503 connection_limit and closed). Connections that have not authenticated — a
// probe, a slow or hostile client — are bounded on their own (MaxPendingConnections): past the bound the
// oldest of them is closed to make room, so sockets that never authenticate cannot hold the listener.
// Behind a reverse proxy the hub sees the proxy's connections, which carry both kinds: set the caps there.

// connKind is a connection's class.
type connKind int

const (
	connPending connKind = iota // not authenticated yet
	connWorker
	connClient
	connGone // closed
)

// connEntry is one tracked connection.
type connEntry struct {
	conn net.Conn
	kind connKind
	elem *list.Element // in conns.pending while connPending
}

// conns tracks the listener's connections by kind.
type conns struct {
	mu      sync.Mutex
	max     [3]int // by kind; 0: no cap
	n       [3]int
	byConn  map[net.Conn]*connEntry
	pending list.List // of *connEntry, oldest first
	evicted int64
}

type connKey struct{}

func newConns(maxPending, maxWorkers, maxClients int) *conns {
	return &conns{max: [3]int{maxPending, maxWorkers, maxClients}, byConn: map[net.Conn]*connEntry{}}
}

// total is the listener's connection cap that goes with the kinds' caps: every kind full, plus room for
// pending connections being closed to make room for new ones.
func (c *conns) total() int { return 2*c.max[connPending] + c.max[connWorker] + c.max[connClient] }

// connContext registers a new connection as pending (http.Server.ConnContext, called once per connection
// before its first request) and hands its entry to its requests. Past the pending cap the oldest pending
// connection is closed.
func (c *conns) connContext(ctx context.Context, nc net.Conn) context.Context {
	e := &connEntry{conn: nc}
	c.mu.Lock()
	c.byConn[nc] = e
	e.elem = c.pending.PushBack(e)
	c.n[connPending]++
	var evict []net.Conn
	for c.max[connPending] > 0 && c.n[connPending] > c.max[connPending] {
		old := c.pending.Remove(c.pending.Front()).(*connEntry)
		c.release(old)
		evict = append(evict, old.conn)
		c.evicted++
	}
	c.mu.Unlock()
	for _, x := range evict {
		_ = x.Close()
	}
	return context.WithValue(ctx, connKey{}, e)
}

// connState gives a closed or hijacked connection's place back (http.Server.ConnState).
func (c *conns) connState(nc net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	c.mu.Lock()
	if e := c.byConn[nc]; e != nil {
		c.release(e)
	}
	c.mu.Unlock()
}

// release forgets e (c.mu held).
func (c *conns) release(e *connEntry) {
	if e.kind == connGone {
		return
	}
	if e.elem != nil {
		c.pending.Remove(e.elem)
		e.elem = nil
	}
	c.n[e.kind]--
	e.kind = connGone
	delete(c.byConn, e.conn)
}

// admit puts the connection of an authenticated request in kind, once; it reports false when kind is
// full. A connection of the other kind (a proxy's, carrying both) stays where it is. Requests on
// connections the hub does not track (tests' servers) are admitted.
func (c *conns) admit(r *http.Request, kind connKind) bool {
	e, _ := r.Context().Value(connKey{}).(*connEntry)
	if e == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.kind != connPending {
		return e.kind != connGone
	}
	if c.max[kind] > 0 && c.n[kind] >= c.max[kind] {
		return false
	}
	c.pending.Remove(e.elem)
	e.elem = nil
	c.n[connPending]--
	c.n[kind]++
	e.kind = kind
	return true
}

// counts reports the connections of each kind (pending, workers, clients).
func (c *conns) counts() [3]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
