package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/server"
)

// newFlagSet returns a FlagSet whose --help prints the command's usage and flags to stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: codellm %s\n\nFlags (each also readable from CODELLM_<FLAG_NAME>):\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args and applies the environment; it returns an exit code > 0 on failure (0 for --help).
func parse(fs *flag.FlagSet, args []string, aliases map[string][]string) (map[string]bool, int) {
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, 0
		}
		return nil, 2
	}
	set, err := applyEnv(fs, aliases)
	if err != nil {
		fmt.Fprintf(fs.Output(), "codellm %s: %v\n", fs.Name(), err)
		return nil, 2
	}
	return set, -1
}

// defaultRootWorkspaceSize is --runner-workspace-size for a root codellm that does not set it.
const defaultRootWorkspaceSize = 256 << 20

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", "serve [flags]", stderr)
	var ef execFlags
	ef.register(fs)
	var cfg server.Config
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "listen address (non-loopback needs --api-key, --client-ca or --insecure-public)")
	registerAlias(fs, "listen")
	fs.StringVar(&cfg.APIKey, "api-key", "", "require Authorization: Bearer <key> (prefer CODELLM_API_KEY: flags show in process listings)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate file (serve HTTPS)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "TLS private key file")
	fs.StringVar(&cfg.ClientCA, "client-ca", "", "CA file: require client certificates signed by it (mutual TLS)")
	fs.BoolVar(&cfg.InsecurePublic, "insecure-public", false, "allow a non-loopback listener without authentication (logged as a warning)")
	fs.BoolVar(&cfg.DebugExtension, "debug-extension", false, "honour the x_codellm_debug request field (exposes block output to callers)")
	var maxBody byteSize = 10 << 20
	fs.Var(&maxBody, "max-body-bytes", "maximum request body")
	dbgFlags := registerDebugFlags(fs)
	idem := registerIdempotencyFlags(fs)
	lf := registerListenerFlags(fs, &cfg)
	var runnerTTL time.Duration
	var runnerSessions int
	fs.DurationVar(&runnerTTL, "runner-session-ttl", 30*time.Minute, "idle time after which a runner API session (X-Runtime-Session-Id) is deleted")
	fs.IntVar(&runnerSessions, "runner-max-sessions", 64, "maximum live runner API sessions")
	var runnerPerOwner int
	var runnerEvict time.Duration
	fs.IntVar(&runnerPerOwner, "runner-max-sessions-per-credential", 0, "live runner sessions per API key or client certificate (0: half of --runner-max-sessions); at the cap the credential's least recently used idle session is replaced")
	fs.DurationVar(&runnerEvict, "runner-session-evict-idle", runner.DefaultEvictIdle, "a full session table evicts the least recently used session idle this long instead of refusing new ones")
	var runnerWorkspace byteSize
	fs.Var(&runnerWorkspace, "runner-workspace-size", "make each runner API workspace a tmpfs of this size (root only; default 256MiB as root, else 0: plain directories bounded per file)")
	set, code := parse(fs, args, nil)
	if code >= 0 {
		return code
	}
	ef.set = set
	if !set["runner-workspace-size"] && os.Geteuid() == 0 {
		// Root can bound every runner workspace on the host disk, so it does by default (issue 14).
		runnerWorkspace = defaultRootWorkspaceSize
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "codellm serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log, err := ef.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 2
	}
	ecfg, sb, err := ef.build(log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	if err := checkAPIKeyLength(cfg.APIKey, cfg.Listen, log); err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	cfg.MaxBodyBytes = int64(maxBody)
	lf.apply(&cfg)
	cfg.Logger = log
	cfg.Version = version
	cfg.Network = ef.network
	cfg.Idempotency = idem.guard()
	srv, err := server.New(cfg, ecfg, sb)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	ef.egressMetrics.m.Store(srv.Metrics().Egress)
	// The Piston-compatible runner API shares the listener, its authentication, the sandbox and the slots.
	rcfg := runner.Config{
		Programs:            ecfg.Programs,
		Sandbox:             sb,
		Slots:               ecfg.Slots,
		Exposed:             ecfg.Exposed,
		WorkRoot:            ef.workDir,
		MaxRunTimeout:       ef.timeout,
		MaxMemory:           int64(ef.memory),
		MaxOutputBytes:      ef.runnerOutputBytes(),
		MaxBodyBytes:        int64(maxBody),
		SessionTTL:          runnerTTL,
		MaxSessions:         runnerSessions,
		MaxSessionsPerOwner: runnerPerOwner,
		EvictIdle:           runnerEvict,
		WorkspaceSize:       int64(runnerWorkspace),
		Deterministic:       ecfg.Deterministic,
		Logger:              log,
	}
	rn, err := runner.New(rcfg)
	if err != nil && !set["runner-workspace-size"] && runnerWorkspace > 0 {
		// The root default needs mount rights (a container may withhold them): fall back, loudly.
		log.Warn("runner workspaces are not bounded on the host disk: the default --runner-workspace-size tmpfs cannot be mounted here",
			"err", err.Error())
		rcfg.WorkspaceSize = 0
		rn, err = runner.New(rcfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: runner API: %v\n", err)
		return 1
	}
	defer rn.Close()
	// The runner API, plus what other bridge workers need (the chat operation on execute, the stateful
	// /sessions/{id}/api/v2 routes): see runner.RegisterBridge.
	rn.RegisterBridge(srv.Route, srv.Handler())
	closeWS, err := registerWorkspaceRoute(srv.Route, sb, ef.workDir, log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: runtime command route: %v\n", err)
		return 1
	}
	defer closeWS()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	dbg, err := startDebugger(ctx, dbgFlags, srv, log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	log.Info("codellm serving", "listen", cfg.Listen, "version", version, "tls", cfg.TLSCert != "",
		"auth", cfg.APIKey != "" || cfg.ClientCA != "")
	err = srv.ListenAndServe(ctx)
	if dbg != nil {
		dbg()
	}
	if err != nil {
		fmt.Fprintf(stderr, "codellm serve: %v\n", err)
		return 1
	}
	log.Info("codellm stopped")
	return 0
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
func (f *execFlags) runnerOutputBytes() int64 {
	if f.set["max-output-bytes"] {
		return int64(f.maxOutput)
	}
	return 1 << 20
}
