package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/responses"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/server"
	"github.com/codellm/codellm/internal/workspace"
)

// defaultWorkspaceSize is --runner-workspace-size when it is not set (root or not): every runner
// workspace is bounded on the host disk by default (issue 14): root mounts a tmpfs, anyone else gets the
// sandbox's private one.
const defaultWorkspaceSize = 256 << 20

// serveFlags are serve's own settings (serveSettings) beside the execution ones.
type serveFlags struct {
	cfg           server.Config
	maxBody       int64
	dbg           *debugFlags
	idem          idempotencyFlags
	rcfg          runner.Config // the session settings; the rest is filled from the engine's
	workspaceSize bool          // --runner-workspace-size was given
	route         workspaceRoute
	metricsListen string // --metrics-listen ("": off)
	metricsGiven  bool   // --metrics-listen was given (not the default)
	cookieLane    bool   // trip2g's --trip2g-url was given: accepted so its command lines start, ignored
}

func (s *serveFlags) bind(v *config.Values) {
	c := &s.cfg
	c.Listen, c.APIKey, c.TLSCert, c.TLSKey = v.String("listen"), v.String("api-key"), v.String("tls-cert"), v.String("tls-key")
	c.ClientCA, c.InsecurePublic, c.DebugExtension = v.String("client-ca"), v.Bool("insecure-public"), v.Bool("debug-extension")
	c.AllowedHosts, c.AllowedOrigins, c.SealPath = v.List("allowed-hosts"), v.List("allowed-origins"), v.String("seal-path")
	c.Limits.MaxConns, c.Limits.Body, c.Limits.Idle = v.Int("max-connections"), v.Duration("body-timeout"), v.Duration("idle-timeout")
	s.maxBody = v.Size("max-body-bytes")
	s.idem = idempotencyFlags{ttl: v.Duration("idempotency-ttl"), maxEntries: v.Int("idempotency-max-entries"), maxBytes: v.Size("idempotency-max-bytes")}
	c.Responses = responses.StoreConfig{TTL: v.Duration("responses-ttl"), MaxEntries: v.Int("responses-max-entries"), MaxBytes: v.Size("responses-max-bytes")}
	s.rcfg = runner.Config{SessionTTL: v.Duration("runner-session-ttl"), MaxSessions: v.Int("runner-max-sessions"),
		MaxSessionsPerOwner: v.Int("runner-max-sessions-per-credential"), EvictIdle: v.Duration("runner-session-evict-idle"),
		WorkspaceSize: v.Size("runner-workspace-size")}
	s.route = workspaceRoute{v.Bool("external-workspace"), v.String("external-workspace-root"), v.String("external-workspace-token")}
	s.workspaceSize = v.IsSet("runner-workspace-size") // the default may fall back to 0 (runner below)
	s.metricsListen, s.metricsGiven = v.String("metrics-listen"), v.IsSet("metrics-listen")
	s.cookieLane = v.IsSet("trip2g-url")
}

// serveFlagSet is serve's FlagSet: the execution, serve and debugger tables.
func serveFlagSet(stderr io.Writer) (*flag.FlagSet, *execFlags, *serveFlags) {
	fs := newFlagSet("serve", "serve [flags]", stderr)
	ef, sf := &execFlags{}, &serveFlags{}
	ef.register(fs)
	register(fs, serveSettings(), sf.bind)
	sf.dbg = registerDebugFlags(fs)
	return fs, ef, sf
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs, ef, sf := serveFlagSet(stderr)
	if _, code := parse(fs, args); code >= 0 {
		return code
	}
	// The route's token is read: no block, exposed variable or child process may see it from here on.
	_ = os.Unsetenv(workspace.EnvRouteToken)
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "codellm serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log, err := ef.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 2
	}
	ef.prestart = true // a long-lived server: the next request's helper waits ready
	sc, err := ef.openScratch(log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	defer sc.Close() // last: the runner's workspace mounts are below it
	ecfg, sb, err := ef.build(log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	defer sb.Close() // kill the waiting helpers, remove the pooled cgroups
	srv, err := sf.server(ef, ecfg, sb, log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	rn, err := sf.runner(ef, ecfg, sb, log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: runner API: %v\n", err)
		return 1
	}
	defer rn.Close()
	// The runner API, plus what other bridge workers need (the chat operation on execute, the stateful
	// /sessions/{id}/api/v2 routes): see runner.RegisterBridge.
	rn.RegisterBridge(srv.Route, srv.Handler())
	closeWS, err := registerWorkspaceRoute(srv.Route, sb, ef.workDir, sf.route, log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: runtime command route: %v\n", err)
		return 1
	}
	defer closeWS()
	if err := sf.serve(srv, log); err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	log.Info("codellm stopped")
	return 0
}

// server builds the HTTP service; a short API key is refused off loopback.
func (s *serveFlags) server(ef *execFlags, ecfg engine.Config, sb *sandbox.Sandbox, log *slog.Logger) (*server.Server, error) {
	cfg := s.cfg
	if err := checkAPIKeyLength(cfg.APIKey, cfg.Listen, log); err != nil {
		return nil, err
	}
	if s.cookieLane {
		// Ignoring it is safe: it configured an extra way in (trip2g's admin cookie), which codellm lacks.
		log.Warn("--trip2g-url (CODELLM_TRIP2G_URL) is trip2g's browser cookie lane, which codellm does not have: ignored; requests authenticate with the API key or a client certificate")
	}
	cfg.MaxBodyBytes = s.maxBody
	cfg.Logger = log
	cfg.Version = version
	cfg.Network = ef.network
	cfg.Idempotency = s.idem.guard()
	srv, err := server.New(cfg, ecfg, sb)
	if err != nil {
		return nil, err
	}
	ef.egressMetrics.m.Store(srv.Metrics().Egress)
	return srv, nil
}

// runner builds the Piston-compatible runner API, which shares the listener, its authentication, the
// sandbox and the slots.
func (s *serveFlags) runner(ef *execFlags, ecfg engine.Config, sb *sandbox.Sandbox, log *slog.Logger) (*runner.Runner, error) {
	rcfg := ef.runnerConfig(s.rcfg, ecfg, sb, log)
	rcfg.MaxBodyBytes = s.maxBody
	rn, err := runner.New(rcfg)
	if err != nil && !s.workspaceSize && rcfg.WorkspaceSize > 0 {
		// The root default needs mount rights (a container may withhold them): fall back, loudly.
		log.Warn("runner workspaces are not bounded on the host disk: the default --runner-workspace-size tmpfs cannot be mounted here",
			"err", err.Error())
		rcfg.WorkspaceSize = 0
		rn, err = runner.New(rcfg)
	}
	return rn, err
}

// serve runs the service (and the step debugger when configured) until SIGTERM or SIGINT.
func (s *serveFlags) serve(srv *server.Server, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopMetrics, err := s.startMetrics(srv, log)
	if err != nil {
		return err
	}
	// The metrics listener outlives the main one's drain, so that a scrape or a probe sees it.
	defer stopMetrics()
	dbg, err := startDebugger(ctx, s.dbg, s.cfg.SealPath, srv, log)
	if err != nil {
		return err
	}
	log.Info("codellm serving", "listen", s.cfg.Listen, "version", version, "tls", s.cfg.TLSCert != "",
		"auth", s.cfg.APIKey != "" || s.cfg.ClientCA != "")
	err = srv.ListenAndServe(ctx)
	if dbg != nil {
		dbg()
	}
	return err
}

// startMetrics serves --metrics-listen (server.MetricsListener) until the returned function, which stops
// it and waits. A non-loopback address without authentication is an error. An address the operator gave
// that cannot be bound is an error too; the default one only a warning, so that a second codellm on the
// host (or a test) still starts: it then has no internal listener, which the log says.
func (s *serveFlags) startMetrics(srv *server.Server, log *slog.Logger) (func(), error) {
	if s.metricsListen == "" {
		return func() {}, nil
	}
	if s.metricsListen == s.cfg.Listen {
		if s.metricsGiven {
			return nil, fmt.Errorf("--metrics-listen and --listen are both %s: give the metrics listener its own address", s.cfg.Listen)
		}
		log.Warn("metrics listener not started: --listen took its default address (set --metrics-listen)", "metrics_listen", s.metricsListen)
		return func() {}, nil
	}
	ml, err := srv.MetricsListener(s.metricsListen)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", ml.Addr)
	if err != nil {
		if s.metricsGiven {
			return nil, fmt.Errorf("--metrics-listen: %w", err)
		}
		log.Warn("metrics listener not started: its default address is taken (set --metrics-listen, or empty to turn it off)",
			"metrics_listen", ml.Addr, "err", err.Error())
		return func() {}, nil
	}
	log.Info("metrics listener serving /metrics, /debug/pprof/ and probes", "metrics_listen", ln.Addr().String(),
		"loopback", listen.IsLoopback(ml.Addr))
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ml.Serve(ctx, ln, httpserve.Options{Log: log, Grace: time.Second}); err != nil {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	return func() { stop(); <-done }, nil
}

// minAPIKeyLength is trip2g's floor for an API key: it guards code execution, so a guessable key guards
// nothing.
const minAPIKeyLength = 32

// checkAPIKeyLength refuses a short API key on a non-loopback listener and warns about one on loopback.
func checkAPIKeyLength(key, addr string, log *slog.Logger) error {
	if key == "" || len(key) >= minAPIKeyLength {
		return nil
	}
	if !listen.IsLoopback(addr) {
		return fmt.Errorf("--api-key is %d characters; a non-loopback listener (%s) needs at least %d", len(key), addr, minAPIKeyLength)
	}
	log.Warn("the API key is shorter than 32 characters; a non-loopback listener would refuse it", "length", len(key))
	return nil
}

// runnerOutputBytes is the runner API's per-stream cap: --max-output-bytes when given, otherwise the
// runner's own 1 MiB default (the 10 MiB default is trip2g's, for the chat pipeline's last block).
// runnerConfig is base (the caller's own runner settings: serve's sessions, the worker's workspace size)
// with the execution settings filled in, shared by serve and the worker's embedded supervisor so that
// --work-dir, --timeout, --memory-limit and --max-output-bytes mean the same in both (the worker once built
// its own and ignored --work-dir and --max-output-bytes).
func (f *execFlags) runnerConfig(base runner.Config, ecfg engine.Config, sb *sandbox.Sandbox, log *slog.Logger) runner.Config {
	c := base
	c.Programs, c.Sandbox, c.Slots, c.Exposed = ecfg.Programs, sb, ecfg.Slots, ecfg.Exposed
	c.WorkRoot, c.MaxRunTimeout, c.MaxMemory, c.MaxOutputBytes = f.workDir, f.timeout, f.memory, f.runnerOutputBytes()
	c.Logger, c.Deterministic, c.NetworkAllow = log, ecfg.Deterministic, ecfg.NetworkAllow
	return c
}

func (f *execFlags) runnerOutputBytes() int64 {
	if f.v != nil && f.v.IsSet("max-output-bytes") {
		return f.maxOutput
	}
	return 1 << 20
}
