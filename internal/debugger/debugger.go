// Package debugger is codellm's loopback step debugger (openai-contract §14): an HTTP surface, served only
// on a loopback --debug-listen address, that lists a body's blocks, runs one block alone, and steps a
// body block by block in stateful sessions whose pipe buffer can be inspected and edited between blocks;
// plus the embedded step UI at "/" and the terminal stepper behind `codellm debug`.
//
// Every run goes through internal/engine, so it uses the production sandbox, limits, environment, slots
// and timeout; errors become the §11 envelope through apierror.Map, so a failure carries the same code
// here as on the chat endpoint.
package debugger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/sealform"
)

// Defaults of §14.3.
const (
	DefaultMaxSessions  = 16
	DefaultSessionTTL   = 15 * time.Minute
	DefaultMaxBodyBytes = 10 << 20
	defaultKillGrace    = 5 * time.Second
)

// ErrNotLoopback: --debug-listen names a non-loopback address; serve refuses to start.
var ErrNotLoopback = errors.New("debug listener address is not loopback")

// ListenError is a refused --debug-listen address; it matches ErrNotLoopback.
type ListenError struct{ Addr string }

func (e *ListenError) Error() string {
	return fmt.Sprintf("debug listener must bind loopback (127.0.0.1, [::1] or localhost), got %q", e.Addr)
}

// Is makes errors.Is(err, ErrNotLoopback) hold.
func (e *ListenError) Is(target error) bool { return target == ErrNotLoopback }

// CheckListen enforces §14.1: the address must be host:port with a loopback host. The debugger has no
// authentication, so anything else would expose code execution to the network.
func CheckListen(addr string) error {
	if !listen.IsLoopback(addr) {
		return &ListenError{Addr: addr}
	}
	return nil
}

// Config configures a Debugger.
type Config struct {
	Engine       *engine.Engine
	MaxSessions  int           // --debug-max-sessions (default 16)
	SessionTTL   time.Duration // --debug-session-ttl (default 15m): idle time before a session expires
	MaxBodyBytes int64         // request body cap (default 10 MiB, as the chat endpoint)
	KillGrace    time.Duration // added to the run timeout when draining at shutdown (default 5s)
	Logger       *slog.Logger
	// SealPath is where the sealing form is served (--seal-path; default sealform.DefaultPath, trip2g's).
	SealPath string
}

// Debugger serves the debug surface. Create it with New.
type Debugger struct {
	cfg      Config
	eng      *engine.Engine
	log      *slog.Logger
	sessions *store
	router   *httpserve.Router
	guarded  http.Handler // the router behind §14.1's Host and Origin rules
	handler  http.Handler
}

// New returns a debugger over eng's configuration.
func New(cfg Config) (*Debugger, error) {
	if cfg.Engine == nil {
		return nil, errors.New("debugger: Config.Engine is nil")
	}
	if cfg.MaxSessions < 0 || cfg.SessionTTL < 0 {
		return nil, errors.New("debugger: --debug-max-sessions and --debug-session-ttl must not be negative")
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = defaultKillGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.SealPath == "" {
		cfg.SealPath = sealform.DefaultPath
	}
	if err := sealform.CheckPath(cfg.SealPath); err != nil {
		return nil, fmt.Errorf("--seal-path: %w", err)
	}
	d := &Debugger{cfg: cfg, eng: cfg.Engine, log: cfg.Logger,
		sessions: &store{m: map[string]*Session{}, max: cfg.MaxSessions, ttl: cfg.SessionTTL}}
	d.router = d.routes()
	d.guarded = httpserve.Guard(debugGuard, nil, refuse, d.router)
	d.handler = http.HandlerFunc(d.serveHTTP)
	return d, nil
}

// Handler returns the debug surface's handler (for the loopback listener only).
func (d *Debugger) Handler() http.Handler { return d.handler }

// Sessions reports how many sessions are open (expired ones included until the next request purges them).
func (d *Debugger) Sessions() int {
	d.sessions.mu.Lock()
	defer d.sessions.mu.Unlock()
	return len(d.sessions.m)
}

// ListenAndServe checks addr (CheckListen), listens and serves until ctx is done.
func (d *Debugger) ListenAndServe(ctx context.Context, addr string) error {
	if err := CheckListen(addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return d.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then stops accepting, closes every session (killing a running
// step) and waits for in-flight requests, at most the run timeout plus the kill grace.
func (d *Debugger) Serve(ctx context.Context, ln net.Listener) error {
	defer d.sessions.closeAll()
	return httpserve.Serve(ctx, ln, d.handler, httpserve.Options{Log: d.log,
		// Nobody can step a session once the listener is gone, so their runs are cut short now.
		Draining: d.sessions.closeAll,
		Grace:    d.eng.Config().Timeout + d.cfg.KillGrace,
	})
}
