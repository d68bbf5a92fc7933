// Package hub is `codellm hub`: the coordinator that pairs and authenticates
// workers on the bridge routes (/v1/bridge/…), fences stale incarnations,
// turns client requests (/v1/exec, /v1/chat/completions) into assignments
// for one worker each, and returns the settled results (spec
// bridge-protocol.md §3, §4, §6, §7, §13). All state lives behind
// store.Store so the embedded bbolt store and a Redis store are
// interchangeable.
package hub

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/hub/filestore"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/idempotency"
	"github.com/codellm/codellm/internal/metrics"
)

// Store is the hub's state interface (see package store).
type Store = store.Store

// ClientKey is one client API key with the identity it grants (§13.3).
type ClientKey struct {
	Key      string   `json:"key"`
	TenantID string   `json:"tenantId"`
	UserID   string   `json:"userId,omitempty"`
	Roles    []string `json:"roles,omitempty"`
	Groups   []string `json:"groups,omitempty"`
	// CodeWorkerID is the worker a signed token pins (its code_worker_id claim); signed marks an identity
	// from a signed token rather than a static key, until the instant its token expires (clientjwt.go).
	CodeWorkerID string `json:"-"`
	signed       bool
	until        time.Time
}

// Auth modes of the worker routes (§4.1).
const (
	AuthPaired = "paired"
	AuthStatic = "static"
)

// Config is the hub's configuration. Zero durations take the spec defaults.
type Config struct {
	AdminToken  string
	WorkerToken string // static mode; defaults to AdminToken
	AuthMode    string // AuthPaired (default) or AuthStatic
	ClientKeys  []ClientKey
	// ClientJWT, when set, also admits clients by LibreChat's signed per-user token (clientjwt.go).
	ClientJWT        *ClientJWT
	DynamicWorkers   bool
	WorkerIDs        []string // optional allow-list; empty admits any valid ID
	CredentialTTL    time.Duration
	PairingTTL       time.Duration
	SignedPathPrefix string
	ClockSkew        time.Duration
	ExecTimeout      time.Duration
	ChatTimeout      time.Duration
	MaxTimeout       time.Duration
	QueueMax         int
	QueueTimeout     time.Duration
	MaxBody          int64
	MaxSettleBody    int64
	// Files keeps uploads and generated files (nil: the file routes answer 501 and /v1/exec refuses
	// file references). FileLimits must be the limits Files was opened with.
	Files             filestore.Store
	FileLimits        filestore.Limits
	MaxExecInputBytes int64 // input files of one /v1/exec together; default 25 MiB
	// MaxUploadMemory bounds the upload bytes all requests hold in memory at once (default 256 MiB);
	// an upload that would pass it is answered 503 upload_busy with Retry-After.
	MaxUploadMemory int64
	// PollInterval is how often a waiter (a lease poll, a dispatcher, a
	// queued client) re-reads the store when no notification woke it: a
	// backstop for a notification a shared store's feed lost (default 5 s;
	// waiters are woken by their own topic, waits.go).
	PollInterval time.Duration
	Logger       *slog.Logger // nil: discard
	// IdempotencyTTL is how long a /v1/exec or chat response to an Idempotency-Key (or a Stainless client
	// retry) is replayed (default 10 min; negative disables); IdempotencyMaxBytes caps one recorded
	// response (default 8 MiB; larger ones are refused on repeat, not run again).
	IdempotencyTTL      time.Duration
	IdempotencyMaxBytes int64
	// IdempotencyMaxEntries and IdempotencyMaxTotalBytes bound all recorded responses together (default
	// 10000 and 64 MiB; the oldest finished go first).
	IdempotencyMaxEntries    int
	IdempotencyMaxTotalBytes int64
	// MaxWorkerConnections and MaxClientConnections cap the connections of each kind of authenticated
	// caller, MaxPendingConnections those that have not authenticated yet (conns.go; defaults 4096, 1024
	// and 256). They apply when the hub serves through serveHTTP (codellm hub serve).
	MaxWorkerConnections  int
	MaxClientConnections  int
	MaxPendingConnections int
	// RateLimits are the per-caller limits of /v1/exec and the file routes (ratelimit.go; upstream's
	// defaults, on unless Off).
	RateLimits RateLimits

	// RuntimeSessionMode is how /v1/exec treats runtime_session_hint (runtimesession.go):
	// RuntimeSessionsAffinity (the default), RuntimeSessionsStrict or RuntimeSessionsStateless.
	RuntimeSessionMode string

	// replicaBeat is how often this replica renews its heartbeat and sweeps dead replicas (default 5 s;
	// tests shorten it).
	replicaBeat time.Duration
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.AuthMode == "" {
		c.AuthMode = AuthPaired
	}
	if c.WorkerToken == "" {
		c.WorkerToken = c.AdminToken
	}
	def(&c.CredentialTTL, 300*time.Second)
	def(&c.PairingTTL, 10*time.Minute)
	def(&c.ClockSkew, 60*time.Second)
	def(&c.ExecTimeout, 300*time.Second) // upstream JOB_TIMEOUT
	def(&c.ChatTimeout, 120*time.Second)
	def(&c.MaxTimeout, 600*time.Second)
	def(&c.QueueTimeout, 30*time.Second)
	def(&c.PollInterval, 5*time.Second)
	def(&c.replicaBeat, defaultReplicaBeat)
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = 10 * time.Minute
	}
	if c.IdempotencyMaxBytes <= 0 {
		c.IdempotencyMaxBytes = 8 << 20
	}
	if c.IdempotencyMaxEntries <= 0 {
		c.IdempotencyMaxEntries = 10000
	}
	if c.IdempotencyMaxTotalBytes <= 0 {
		c.IdempotencyMaxTotalBytes = 64 << 20
	}
	if c.QueueMax <= 0 {
		c.QueueMax = 100
	}
	for _, v := range []struct {
		p   *int
		def int
	}{{&c.MaxWorkerConnections, 4096}, {&c.MaxClientConnections, 1024}, {&c.MaxPendingConnections, 256}} {
		if *v.p <= 0 {
			*v.p = v.def
		}
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 1 << 20
	}
	if c.MaxSettleBody <= 0 {
		c.MaxSettleBody = 32 << 20
	}
	c.FileLimits = c.FileLimits.WithDefaults()
	c.RateLimits.defaults()
	if c.MaxExecInputBytes <= 0 {
		c.MaxExecInputBytes = DefaultMaxExecInputBytes
	}
	if c.MaxUploadMemory <= 0 {
		c.MaxUploadMemory = DefaultMaxUploadMemory
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RuntimeSessionMode == "" {
		c.RuntimeSessionMode = RuntimeSessionsAffinity
	}
}

// ErrConfig is wrapped by configuration errors.
var ErrConfig = errors.New("hub: invalid configuration")

// Hub serves the bridge, admin and client routes.
type Hub struct {
	cfg   Config
	store Store

	waits *waits
	pools poolCatalog
	// queued remembers queues found empty (queue.go), to spare a store read per dispatch.
	queued queueHints

	closing   chan struct{}
	closeOnce sync.Once
	router    *httpserve.Router

	metrics *metrics.Hub
	// creds caches worker credentials for the routes that confirm them in the store (credcache.go).
	creds credCache
	// largeBodies bounds concurrent settle-body reads (largeBodySlot).
	largeOnce   sync.Once
	largeBodies chan struct{}
	health      storeHealth
	idem        *idempotency.Guard // nil: the store has no Backend, or disabled
	replica     *replicaRecords    // nil: the store has no Backend
	conns       *conns
	uploads     *uploadBudget
	limits      *limiters
	backend     store.Backend // the store's records (programmatic executions, programmatic.go)
}

// New builds a hub over st. The hub does not own st; the caller closes it
// after Close.
func New(cfg Config, st Store) (*Hub, error) {
	cfg.defaults()
	if cfg.AuthMode != AuthPaired && cfg.AuthMode != AuthStatic {
		return nil, errors.Join(ErrConfig, errors.New("auth mode must be paired or static"))
	}
	for _, id := range cfg.WorkerIDs {
		if !bridge.ValidWorkerID(id) {
			return nil, errors.Join(ErrConfig, errors.New("invalid worker ID in allow-list: "+id))
		}
	}
	if m := cfg.RuntimeSessionMode; m != RuntimeSessionsAffinity && m != RuntimeSessionsStrict && m != RuntimeSessionsStateless {
		return nil, errors.Join(ErrConfig, errors.New("runtime session mode must be affinity, strict or stateless, not "+m))
	}
	for _, k := range cfg.ClientKeys {
		if k.Key == "" || !bridge.ValidWorkerID(k.TenantID) {
			return nil, errors.Join(ErrConfig, errors.New("client keys need a key and a valid tenantId"))
		}
	}
	if cfg.ClientJWT != nil {
		jwt := *cfg.ClientJWT
		if err := jwt.check(); err != nil {
			return nil, errors.Join(ErrConfig, err)
		}
		cfg.ClientJWT = &jwt
	}
	h := &Hub{
		cfg: cfg, store: st, waits: newWaits(), closing: make(chan struct{}),
	}
	h.conns = newConns(cfg.MaxPendingConnections, cfg.MaxWorkerConnections, cfg.MaxClientConnections)
	h.uploads = &uploadBudget{max: cfg.MaxUploadMemory, left: cfg.MaxUploadMemory}
	h.metrics = metrics.NewHub(h.onlineWorkers)
	h.limits = newLimiters(cfg.RateLimits)
	h.router = h.routes()
	bs, ok := st.(interface{ Backend() store.Backend })
	if !ok {
		return nil, errors.Join(ErrConfig, errors.New("the hub store exposes no record backend"))
	}
	bs.Backend().OnNotify(h.Notify)
	h.backend = bs.Backend()
	h.replica = startReplica(st, bs.Backend(), cfg.replicaBeat, h.closing, func(dead string, n int) {
		h.cfg.Logger.Warn("ended the assignments of a hub replica that stopped", "replica", dead, "assignments", n)
	})
	h.setupIdempotency(st)
	if o, ok := st.(interface{ ObserveErrors(func(string, error)) }); ok {
		o.ObserveErrors(h.storeFailed)
	}
	// Learn the store's epoch now; an unreachable store is learned later.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = h.checkEpoch(ctx)
	cancel()
	return h, nil
}

// Metrics returns the hub's metrics (served on GET /metrics behind the admin token).
func (h *Hub) Metrics() *metrics.Hub { return h.metrics }

// onlineWorkers counts online workers for a scrape. The store may be remote (Redis), so the read is
// bounded; a failed read reports -1 rather than a plausible-looking 0.
func (h *Hub) onlineWorkers() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	all, err := h.store.Workers(ctx)
	if err != nil {
		return -1
	}
	n := 0
	for _, w := range all {
		if w.Online {
			n++
		}
	}
	return float64(n)
}

// serveMetrics exposes the hub metrics to holders of the admin token only: worker counts and
// assignment rates reveal tenant activity, and the hub is usually reachable by every worker.
func (h *Hub) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		bridge.WriteError(w, errMethod)
		return
	}
	if err := h.authAdmin(r); err != nil {
		bridge.WriteError(w, err)
		return
	}
	if !h.conns.admit(r, connClient) {
		w.Header().Set("Connection", "close")
		bridge.WriteError(w, errConnLimit)
		return
	}
	h.metrics.Handler().ServeHTTP(w, r)
}

// Close wakes every waiting request: lease polls answer empty, queued clients get 503, and runs already
// handed to a worker are waited for within the caller's drain. Call it before http.Server.Shutdown so
// Shutdown does not sit out a 30 s long poll. It stops the replica's heartbeat and waits for it.
func (h *Hub) Close() {
	h.closeOnce.Do(func() { close(h.closing) })
	if h.replica != nil {
		<-h.replica.done
	}
}

// sleep waits for ch (a watched topic), d (the backstop), ctx or the hub's closing. It reports false when
// the caller should stop (ctx done or hub closing).
func (h *Hub) sleep(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	return h.sleep2(ctx, ch, nil, d)
}

// sleep2 is sleep on either of two topics (nil: none).
func (h *Hub) sleep2(ctx context.Context, a, b <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-a:
	case <-b:
	case <-t.C:
	case <-ctx.Done():
		return false
	case <-h.closing:
		return false
	}
	return true
}

// ServeHTTP routes every request. Before answering a request whose body was not read to the end — every
// refusal: no or a wrong credential, a full cap, an unknown route — net/http reads up to 256 KiB of the
// rest (to keep the connection), which a hostile client can stretch to the whole body timeout by
// trickling it. The hub gives that read one second (unreadGrace): a body that arrives is drained as
// before, a trickle gets its answer and the connection is closed.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		b := &eofBody{ReadCloser: r.Body}
		r.Body = b
		w = &closeUnread{ResponseWriter: w, body: b}
	}
	h.router.ServeHTTP(w, r)
}

// eofBody notes whether a request body was read to its end.
type eofBody struct {
	io.ReadCloser
	eof bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// unreadGrace is how long net/http may read the unread rest of a body before the answer.
const unreadGrace = time.Second

// closeUnread bounds the read of an unread request body's rest to unreadGrace.
type closeUnread struct {
	http.ResponseWriter
	body  *eofBody
	wrote bool
}

func (c *closeUnread) WriteHeader(code int) {
	if !c.wrote {
		c.wrote = true
		if !c.body.eof {
			_ = http.NewResponseController(c.ResponseWriter).SetReadDeadline(time.Now().Add(unreadGrace))
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *closeUnread) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(p)
}

func (c *closeUnread) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *closeUnread) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// routes builds the hub's router. Every route checks its own method (each answers 405 in its own
// envelope) and works on the raw request path (bridge.RequestPath), which is what bridge signatures
// cover: a request whose raw path is not the route's own (percent-encoded letters, an absolute URI) is
// not found, as it always was.
func (h *Hub) routes() *httpserve.Router {
	rt := httpserve.NewRouter(notFound, func(w http.ResponseWriter, r *http.Request, _ []string) { notFound(w, r) })
	exec := h.idempotent(h.clientRoute(http.MethodPost, execRefusals, h.rateLimited(h.limits.exec, writeExecError, h.handleExec)), writeExecError)
	chat := h.idempotent(h.clientRoute(http.MethodPost, chatRefusals, h.handleChat), writeChatError)
	tools := h.clientRoute(http.MethodPost, toolRefusals, h.handleWorkspaceTools)
	whole := func(f http.HandlerFunc) func(w http.ResponseWriter, r *http.Request, _ string) {
		return func(w http.ResponseWriter, r *http.Request, _ string) { f(w, r) }
	}
	for pattern, serve := range map[string]func(w http.ResponseWriter, r *http.Request, path string){
		"/healthz": whole(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
		}),
		"/readyz":              whole(h.serveReady),
		"/metrics":             whole(h.serveMetrics),
		"/v1/exec":             whole(exec),
		"/v1/chat/completions": whole(chat),
		"/v1/workspace-tools":  whole(tools),
		"/v1/bridge/": func(w http.ResponseWriter, r *http.Request, path string) {
			h.serveBridge(w, r, strings.TrimPrefix(path, "/v1/bridge/"))
		},
		"/v1/upload":    h.serveFiles,
		"/v1/files/":    h.serveFiles,
		"/v1/download/": h.serveFiles,
		"/v1/upload/":   h.serveFiles,
		"/v1/sessions/": h.serveFiles,
		"/v1/health":    whole(h.serveHealth),
	} {
		rt.Handle(pattern, onRawPath(pattern, serve))
	}
	// LibreChat's workspace tools (outside the table so that its alignment, and other routes' lines, stay).
	toolsExecute := h.clientRoute(http.MethodPost, toolRefusals, h.handleWorkspaceExecute)
	rt.Handle("/v1/workspace-tools/execute", onRawPath("/v1/workspace-tools/execute", whole(toolsExecute)))
	h.programmaticRoutes(rt, whole)
	return rt
}

// onRawPath runs serve when the raw request path is pattern (or, for a pattern ending in "/", below it).
func onRawPath(pattern string, serve func(w http.ResponseWriter, r *http.Request, path string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		path := bridge.RequestPath(r)
		if path != pattern && !(strings.HasSuffix(pattern, "/") && strings.HasPrefix(path, pattern)) {
			notFound(w, r)
			return
		}
		serve(w, r, path)
	}
}

func (h *Hub) serveFiles(w http.ResponseWriter, r *http.Request, path string) {
	if !h.fileRoute(w, r, path) {
		notFound(w, r)
	}
}

func notFound(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusNotFound, []byte(`{"error":"Not found"}`))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeValue(w http.ResponseWriter, status int, v any) {
	b, err := bridge.Marshal(v)
	if err != nil {
		bridge.WriteError(w, err)
		return
	}
	writeJSON(w, status, b)
}

// configured reports whether workerID is admitted by the allow-list. With no
// list the admin token is the authority and every valid ID is configured.
func (h *Hub) configured(workerID string) bool {
	return len(h.cfg.WorkerIDs) == 0 || slices.Contains(h.cfg.WorkerIDs, workerID)
}
