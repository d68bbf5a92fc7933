package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/chat"
	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/metrics"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/worker"
	"github.com/codellm/codellm/internal/workspace"
)

// chatRuntimeLabel advertises codellm's chat pipeline to the hub (§13.2).
const chatRuntimeLabel = "codellm.openai.chat.v1"

// workerFlags are the settings of `codellm worker run` and its siblings (bridge-protocol.md §12,
// workerSettings): each also reads CODELLM_<NAME> and then LIBRECHAT_CODE_<NAME>.
type workerFlags struct {
	url, workerID, token, identity         string
	supervisor, endpoint, profile          string
	runtimes, policy, workerDir            string
	workspaceID, workspaceName, commandBox string
	allowedDomains, markerFile             string
	stateful, defaultWS, writes, commands  bool
	requireReady, allowRemote              bool
	leaseWait                              time.Duration
	leaseSlots                             int
	container                              containerFlags
	docker                                 *worker.Docker // the docker supervisor, for the runtime command sandbox
	metricsListen                          string
	runsEgress, commandsEgress             *sandbox.EgressReport // the egress proxies, for /readyz
	relay                                  relayFlags            // the in-process file relay (filerelay.go)
}

// containerFlags configure the docker supervisors (§11.4).
type containerFlags struct {
	cli, image, seccomp, packages, sandbox string
	memory                                 int64 // --container-memory-limit (0: --memory-limit plus the runner's share)
	pids, maxSessions                      int   // --container-pids-limit (0: likewise), --container-max-sessions
	sessionTTL                             time.Duration
}

// Defaults of a runtime container's bounds beyond one run's: the runner (codellm serve) it holds.
const (
	containerRunnerMemory = 256 << 20
	containerRunnerPids   = 64
)

// dockerSupervisor builds the docker or docker-nsjail supervisor of worker owner, its containers bounded
// by the container flags (by default one run's limits, ef's, plus the runner's share).
func (c *containerFlags) dockerSupervisor(sup string, ef *execFlags, owner string) (*worker.Docker, error) {
	switch c.sandbox {
	case "native", "besteffort":
	default:
		return nil, fmt.Errorf("%w: --runtime-supervisor %s needs --container-sandbox native or besteffort (codellm's sandbox inside the container; choose explicitly), got %q", worker.ErrConfig, sup, c.sandbox)
	}
	mem, pids := c.memory, c.pids
	if mem == 0 {
		mem = ef.memory + containerRunnerMemory
	}
	if pids == 0 {
		pids = ef.pids + containerRunnerPids
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return worker.NewDocker(ctx, worker.DockerConfig{CLI: c.cli, Image: c.image, NSJail: sup != "docker",
		SeccompProfile: c.seccomp, PackagesPath: c.packages, Env: []string{"CODELLM_SANDBOX=" + c.sandbox},
		Memory: mem, Pids: pids, Owner: owner, Sessions: worker.DockerSessions{TTL: c.sessionTTL, Max: c.maxSessions}})
}

func (f *workerFlags) register(fs *flag.FlagSet, run bool) {
	register(fs, workerSettings(), f.bind)
	if run {
		register(fs, workerRunSettings(), f.bindRun)
	}
}

func (f *workerFlags) bind(v *config.Values) {
	f.url, f.workerID, f.token, f.identity = v.String("url"), v.String("worker-id"), v.String("worker-token"), v.String("identity")
	f.workerDir, f.defaultWS, f.workspaceID = v.String("worker-dir"), v.Bool("default-workspace"), v.String("workspace-id")
	f.markerFile = v.String("workspace-quarantine-file")
}

func (f *workerFlags) bindRun(v *config.Values) {
	f.supervisor, f.endpoint, f.stateful = v.String("runtime-supervisor"), v.String("sandbox-endpoint"), v.Bool("stateful-workspace")
	f.allowRemote, f.profile, f.runtimes, f.policy = v.Bool("allow-remote-endpoint"), v.String("sandbox-profile"), v.String("runtimes"), v.String("policy")
	f.workspaceName, f.writes, f.commands = v.String("workspace-name"), v.Bool("allow-workspace-writes"), v.Bool("allow-workspace-commands")
	f.commandBox, f.allowedDomains = v.String("command-sandbox"), v.String("command-allowed-domains")
	f.requireReady, f.leaseWait, f.metricsListen = v.Bool("require-ready"), v.Duration("lease-wait"), v.String("metrics-listen")
	f.leaseSlots = v.Int("workspace-lease-slots")
	c := &f.container
	c.cli, c.image, c.seccomp = v.String("container-cli"), v.String("runtime-image"), v.String("docker-seccomp-profile")
	c.packages, c.sandbox = v.String("docker-packages-path"), v.String("container-sandbox")
	c.memory, c.pids = v.Size("container-memory-limit"), v.Int("container-pids-limit")
	c.sessionTTL, c.maxSessions = v.Duration("container-session-ttl"), v.Int("container-max-sessions")
	f.relay.upstream, f.relay.manifestKey = v.String("file-relay-upstream"), v.String("execution-manifest-public-key")
	f.relay.bindLimits(v)
}

// parseInterspersed parses flags that may come before, between or after the positional arguments
// (a pairing code may begin with "-": only an argument naming a flag is one), loads the environment and
// warns about differing spellings on stderr.
func parseInterspersed(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, int) {
	v, code := config.ParseDashPositional(fs, args, families(fs), os.LookupEnv)
	if code >= 0 {
		return nil, code
	}
	v.Warn(slog.New(slog.NewTextHandler(stderr, nil)))
	return fs.Args(), -1
}

// workerCommands are the worker's subcommands, for `codellm worker --help`.
var workerCommands = []subcommand{
	{"pair", "<url> <code> --worker-id ID", "redeem a pairing code from `codellm hub pair` and save the worker's identity"},
	{"run", "[flags]", "connect to the hub and run what it assigns (the default: `codellm worker` alone runs)"},
	{"reset-workspace", "<runtimeSessionId>", "ask the hub to fence a runtime session and remove its local state"},
	{"clear-workspace-quarantine", "[--worker-dir D | --default-workspace]", "remove the mutation quarantine marker (inspect the directory first)"},
	{"relay", "[flags]", "serve the file relay alone: sandboxes' by-reference inputs and generated files to the Code API's egress gateway"},
}

func cmdWorker(args []string, stdout, stderr io.Writer) int {
	sub := "run"
	if len(args) > 0 && isHelp(args[0]) {
		writeSubcommands(stderr, "worker", workerCommands)
		fmt.Fprintln(stderr, "\n'codellm worker COMMAND --help' shows a command's flags.")
		return 0
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "pair":
		return workerPair(args, stdout, stderr)
	case "run":
		return workerRun(args, stderr)
	case "reset-workspace":
		return workerReset(args, stdout, stderr)
	case "clear-workspace-quarantine":
		return workerClear(args, stdout, stderr)
	case "relay":
		return workerRelay(args, stderr)
	}
	return config.UsageError(stderr, "worker", fmt.Errorf("unknown command %q (pair, run, reset-workspace, clear-workspace-quarantine, relay)", sub))
}

func workerFail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "codellm worker: %v\n", err)
	if code := worker.ExitCode(err); code != worker.ExitOK {
		return code
	}
	return 1
}

func home() (string, error) {
	h, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: no home directory: %v", worker.ErrConfig, err)
	}
	return h, nil
}

func workerPair(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("worker pair", "worker pair <url> <code> --worker-id <id> [--identity <path>]", stderr)
	var f workerFlags
	f.register(fs, false)
	pos, code := parseInterspersed(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if len(pos) != 2 || f.workerID == "" {
		return config.UsageError(stderr, "worker pair", errors.New("want <url> <code> --worker-id <id>"))
	}
	path := f.identity
	if path == "" {
		h, err := home()
		if err != nil {
			return workerFail(stderr, err)
		}
		path = worker.DefaultIdentityPath(h, f.workerID)
	}
	if _, err := worker.Pair(context.Background(), nil, pos[0], pos[1], f.workerID, path); err != nil {
		fmt.Fprintf(stderr, "codellm worker: pairing failed: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "Paired worker %s. Identity saved to %s\n", f.workerID, path)
	return 0
}

// resolved is the identity, URL and worker ID every subcommand starts from.
type resolved struct {
	home, url, workerID, identityPath string
	identity                          *worker.Identity
}

func (f *workerFlags) resolve() (*resolved, error) {
	h, err := home()
	if err != nil {
		return nil, err
	}
	r := &resolved{home: h, url: f.url, workerID: f.workerID}
	if f.token == "" {
		r.identityPath = f.identity
		if r.identityPath == "" {
			if f.workerID == "" {
				return nil, fmt.Errorf("%w: --worker-id or --identity is required", worker.ErrConfig)
			}
			r.identityPath = worker.DefaultIdentityPath(h, f.workerID)
		}
		id, err := worker.LoadIdentity(r.identityPath, f.workerID)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", worker.ErrConfig, err)
		}
		r.identity, r.workerID = id, id.WorkerID
		if r.url == "" {
			r.url = id.CodeAPIURL
		}
	}
	if r.workerID == "" || r.url == "" {
		return nil, fmt.Errorf("%w: static mode needs --worker-id and --url", worker.ErrConfig)
	}
	r.url = strings.TrimRight(r.url, "/")
	return r, nil
}

// lock takes the run lock of this worker identity (one process per worker ID and hub), which run, reset
// and clear all need before touching local state.
func (r *resolved) lock() (*worker.RunLock, error) {
	lockPath, err := r.lockPath()
	if err != nil {
		return nil, err
	}
	return worker.AcquireRunLock(lockPath)
}

func (r *resolved) lockPath() (string, error) { return worker.LockPath(r.home, r.url, r.workerID) }

// workspaceRoot returns the registered directory ("" for none) and the marker path.
func (f *workerFlags) workspaceRoot(r *resolved, create bool) (string, string, error) {
	if f.workerDir != "" && f.defaultWS {
		return "", "", fmt.Errorf("%w: --worker-dir and --default-workspace are mutually exclusive", worker.ErrConfig)
	}
	root := f.workerDir
	if f.defaultWS {
		sec := f.token
		if r.identity != nil {
			sec = r.identity.PublicKey
		}
		spec := workspace.DefaultSpec{HubURL: r.url, Secret: sec, WorkerID: r.workerID, WorkspaceID: f.workspaceID, Home: r.home}
		var err error
		if create {
			root, err = workspace.EnsureDefault(spec)
		} else {
			root, err = workspace.DefaultRoot(spec)
		}
		if err != nil {
			return "", "", fmt.Errorf("%w: %w", worker.ErrConfig, err)
		}
	}
	if root == "" {
		return "", "", nil
	}
	marker := f.markerFile
	if marker == "" {
		var err error
		if marker, err = worker.MarkerPath(r.home, r.url, r.workerID, root); err != nil {
			return "", "", err
		}
	}
	return root, marker, nil
}

// signalContexts: the first SIGINT/SIGTERM drains, the second aborts.
func signalContexts() (drain, hard context.Context, stop func()) {
	drain, dc := context.WithCancel(context.Background())
	hard, hc := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		n := 0
		for {
			select {
			case <-ch:
				n++
				if n == 1 {
					dc()
				} else {
					hc()
				}
			case <-done:
				return
			}
		}
	}()
	return drain, hard, func() { signal.Stop(ch); close(done); dc(); hc() }
}

func workerRun(args []string, stderr io.Writer) int {
	fs := newFlagSet("worker run", "worker run [flags]", stderr)
	var f workerFlags
	f.register(fs, true)
	var ef execFlags
	ef.register(fs)
	pos, code := parseInterspersed(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return config.UsageError(stderr, "worker run", fmt.Errorf("unexpected argument %q (run takes flags only)", pos[0]))
	}
	r, err := f.resolve()
	if err != nil {
		return workerFail(stderr, err)
	}
	lock, err := r.lock()
	if err != nil {
		return workerFail(stderr, err)
	}
	defer lock.Release()

	log, err := ef.logger(stderr)
	if err != nil {
		return workerFail(stderr, err)
	}
	sup := f.supervisorName()
	cfg := worker.Config{BaseURL: r.url, WorkerID: r.workerID, Identity: r.identity, IdentityPath: r.identityPath,
		StaticToken: f.token, SandboxProfile: f.profile, RequireReady: f.requireReady, LeaseSlots: f.leaseSlots, Log: stderr,
		Timing: worker.Timing{LeaseWait: min(f.leaseWait, 30*time.Second)}}
	wm := ef.workerMetrics()
	runtimes, commandSandbox, closeSup, err := f.buildSupervisor(sup, &ef, &cfg, log)
	if err != nil {
		return workerFail(stderr, err)
	}
	defer closeSup()
	fe, stopRelay, err := f.relay.fileEgress(log)
	if err != nil {
		return workerFail(stderr, err)
	}
	defer stopRelay()
	if fe != nil { // every supervisor: the worker, not the sandbox, talks to the relay
		cfg.Supervisor = worker.WithFileEgress(cfg.Supervisor, fe)
	}
	if f.runtimes != "" { // --runtimes replaces the supervisor's labels
		runtimes = splitList(f.runtimes)
	}
	cfg.Runtimes = runtimes
	cmdPolicy, err := egress.ParseList(f.allowedDomains)
	if err != nil {
		return workerFail(stderr, fmt.Errorf("%w: --command-allowed-domains: %v", worker.ErrConfig, err))
	}
	domains := cmdPolicy.Entries() // normalised: the digest does not depend on spelling

	commandsOn, closeWS, err := f.openWorkspace(r, &cfg, commandSandbox, cmdPolicy, &ef, log)
	if err != nil {
		return workerFail(stderr, err)
	}
	defer closeWS()
	// The digest names codellm's embedded command sandbox and its egress only when commands run in it
	// (the reference adds nothing for the runtime command sandbox).
	cfg.PolicyDigest = worker.PolicyDigest(f.policy, commandsOn && f.commandSandbox(sup) != "runtime", domains)
	w, err := worker.New(cfg)
	if err != nil {
		return workerFail(stderr, err)
	}
	drain, hard, stop := signalContexts()
	defer stop()
	stopStatus, err := f.startStatus(w, r.workerID, sup, wm, log)
	if err != nil {
		return workerFail(stderr, err)
	}
	defer stopStatus()
	fmt.Fprintf(stderr, "codellm worker: %s running against %s (incarnation %s)\n", r.workerID, r.url, w.IncarnationID())
	if err := w.Run(drain, hard); err != nil {
		return workerFail(stderr, err)
	}
	return 0
}

func workerReset(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("worker reset-workspace", "worker reset-workspace <runtimeSessionId> [flags]", stderr)
	var f workerFlags
	f.register(fs, false)
	register(fs, []config.Setting{
		{Name: "runtime-supervisor", Kind: config.String, Usage: "the worker's runtime supervisor: docker* removes the session's container"},
		containerCLI}, func(v *config.Values) {
		f.supervisor, f.container.cli = v.String("runtime-supervisor"), v.String("container-cli")
	})
	pos, code := parseInterspersed(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if len(pos) != 1 {
		return config.UsageError(stderr, "worker reset-workspace", fmt.Errorf("want one <runtimeSessionId>, got %d arguments", len(pos)))
	}
	r, err := f.resolve()
	if err != nil {
		return workerFail(stderr, err)
	}
	lock, err := r.lock()
	if err != nil {
		return workerFail(stderr, err)
	}
	defer lock.Release()
	// The embedded runner's session workspaces live only as long as the worker process that made them,
	// so a stopped worker leaves nothing to delete locally; the hub's fence is what remains.
	// The docker supervisors' containers outlive the worker: `container rm --force` (§10.4 step 4).
	sup := noLocalState{}
	if strings.HasPrefix(f.supervisor, "docker") {
		sup.remove = func(ctx context.Context, sid string) error { return worker.RemoveContainer(ctx, f.container.cli, sid) }
	}
	w, err := worker.New(worker.Config{BaseURL: r.url, WorkerID: r.workerID, Identity: r.identity, IdentityPath: r.identityPath,
		StaticToken: f.token, Supervisor: sup, Log: stderr})
	if err != nil {
		return workerFail(stderr, err)
	}
	if err := w.ResetWorkspace(context.Background(), pos[0]); err != nil {
		return workerFail(stderr, err)
	}
	fmt.Fprintf(stdout, "reset acknowledged for %s\n", pos[0])
	return 0
}

// noLocalState is the supervisor of reset-workspace: it never executes, and there is no local session
// state to discard once the worker process is gone.
type noLocalState struct {
	remove func(ctx context.Context, sessionID string) error // docker supervisors: remove the container
}

func (noLocalState) Stateful() bool { return true }
func (noLocalState) Label() string  { return "codellm-embedded" }
func (noLocalState) Execute(context.Context, worker.RunnerCall) (*bridge.Object, error) {
	return nil, &worker.RunError{Message: "reset-workspace does not execute", KnownClean: true}
}
func (n noLocalState) Reset(ctx context.Context, sid string) error {
	if n.remove != nil {
		return n.remove(ctx, sid)
	}
	return nil
}
func (n noLocalState) Quarantine(ctx context.Context, sid string) error { return n.Reset(ctx, sid) }

func workerClear(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("worker clear-workspace-quarantine", "worker clear-workspace-quarantine [--worker-dir D | --default-workspace] [--workspace-id ID]", stderr)
	var f workerFlags
	f.register(fs, false)
	pos, code := parseInterspersed(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return config.UsageError(stderr, "worker clear-workspace-quarantine", fmt.Errorf("unexpected argument %q", pos[0]))
	}
	r, err := f.resolve()
	if err != nil {
		fmt.Fprintf(stderr, "codellm worker: %v\n", err)
		return 1
	}
	_, marker, err := f.workspaceRoot(r, false)
	if err != nil || marker == "" {
		fmt.Fprintf(stderr, "codellm worker: cannot resolve the quarantine marker (give --worker-dir or --default-workspace): %v\n", err)
		return 1
	}
	lock, err := r.lock()
	if err != nil {
		fmt.Fprintf(stderr, "codellm worker: refusing while a worker is running: %v\n", err)
		return 1
	}
	defer lock.Release()
	if err := worker.RemoveMarker(marker); err != nil {
		fmt.Fprintf(stderr, "codellm worker: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "cleared workspace mutation quarantine for %s\n", f.workspaceID)
	return 0
}

// commandEgressSandbox is the sandbox of workspace commands when --command-allowed-domains is set: the
// execution sandbox's settings plus the filtering egress proxy, so that commands (and only they) can reach
// exactly those destinations.
func commandEgressSandbox(ef *execFlags, pol *egress.Policy, log *slog.Logger) (*sandbox.Sandbox, error) {
	scfg, err := ef.baseSandboxConfig(log)
	if err != nil {
		return nil, err
	}
	if scfg.Network {
		return nil, errors.New("--command-allowed-domains needs a sandbox without --network")
	}
	p, rep, err := ef.egressProxy(strings.Join(pol.Entries(), ","), "workspace commands", log, &ef.commandEgressMetrics)
	if err != nil {
		return nil, fmt.Errorf("--command-allowed-domains: %w", err)
	}
	scfg.Egress, scfg.EgressReport = egressOpener(p), rep
	sb, err := sandbox.New(scfg)
	if err != nil {
		return nil, fmt.Errorf("command sandbox: %w", err)
	}
	return sb, nil
}

// embeddedSupervisor runs codellm's runner and chat core in this process. The chat operation calls the
// chat core directly (no HTTP server in-process): exactly-once is the hub's settlement, so neither the
// server's idempotency guard nor its listener rules apply here.
func (f *workerFlags) embeddedSupervisor(ef *execFlags, cfg *worker.Config, log *slog.Logger) ([]string, *workspace.Options, func(), error) {
	sc, err := ef.openScratch(log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", worker.ErrConfig, err)
	}
	ecfg, sb, err := ef.build(log)
	if err != nil {
		sc.Close()
		return nil, nil, nil, fmt.Errorf("%w: %w", worker.ErrConfig, err)
	}
	f.runsEgress = sb.Report().Egress
	// Workspaces bounded as serve's are by default (issue 14): a worker is usually not root, so this is the
	// sandbox's private tmpfs, copied back for sessions.
	rn, err := runner.New(ef.runnerConfig(runner.Config{WorkspaceSize: defaultWorkspaceSize}, ecfg, sb, log))
	if err != nil {
		sc.Close()
		return nil, nil, nil, fmt.Errorf("%w: %w", worker.ErrConfig, err)
	}
	eng := engine.New(ecfg, nil)
	eng.SweepStale(log)
	// The sandbox self-test runs before registration; a failure is fatal (§11.2).
	if reason := eng.SelfCheck(context.Background(), log); reason != "" {
		rn.Close()
		sc.Close()
		return nil, nil, nil, fmt.Errorf("%w: sandbox self-test failed: %s", worker.ErrConfig, reason)
	}
	cfg.Supervisor = worker.NewEmbedded(rn, chat.New(chat.Config{Engine: eng, Logger: log}).Handler(), f.stateful)
	// The Sandbox is closed too: it kills its pre-started helpers and removes its pooled run cgroups, which
	// would otherwise outlive the worker until the next codellm start swept them.
	return append(ecfg.Programs.Names(), chatRuntimeLabel), &workspace.Options{Sandbox: sb}, func() { rn.Close(); sb.Close(); sc.Close() }, nil
}

// buildSupervisor makes the runtime supervisor named sup (§11.4) and puts it in cfg. It returns the
// runtime labels it serves (nil: the supervisor's own), the sandbox for workspace commands (nil: none)
// and a func to call when the worker stops.
func (f *workerFlags) buildSupervisor(sup string, ef *execFlags, cfg *worker.Config, log *slog.Logger) ([]string, *workspace.Options, func(), error) {
	nop := func() {}
	switch sup {
	case "embedded":
		return f.embeddedSupervisor(ef, cfg, log)
	case "endpoint":
		ep := f.endpoint
		if ep == "" {
			ep = "http://127.0.0.1:2000/api/v2"
		}
		e, err := worker.NewEndpoint(ep, f.allowRemote, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		if f.stateful && !e.Stateful() {
			return nil, nil, nil, fmt.Errorf("%w: --stateful-workspace needs {runtimeSessionId} in the sandbox endpoint", worker.ErrConfig)
		}
		cfg.Supervisor = e
		return nil, nil, nop, nil
	case "docker", "docker-nsjail", "docker-macos-nsjail":
		d, err := f.container.dockerSupervisor(sup, ef, cfg.WorkerID)
		if err != nil {
			return nil, nil, nil, err
		}
		cfg.Supervisor, f.docker = d, d
		if !f.commands || f.commandSandbox(sup) == "runtime" {
			return nil, nil, d.Close, nil
		}
		// --command-sandbox embedded: workspace commands run on the worker host in codellm's own sandbox.
		scfg, err := ef.sandboxConfig(log)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w: %w", worker.ErrConfig, err)
		}
		sb, err := sandbox.New(scfg)
		if err != nil {
			d.Close()
			return nil, nil, nil, errors.Join(worker.ErrConfig, err)
		}
		return nil, &workspace.Options{Sandbox: sb}, func() { sb.Close(); d.Close() }, nil
	}
	return nil, nil, nil, fmt.Errorf("%w: runtime supervisor %q is not available in this build (embedded, endpoint, docker, docker-nsjail)", worker.ErrConfig, sup)
}

// openWorkspace opens the worker's workspace (§11.5) when it has one and puts it in cfg: writes and
// commands as the flags allow, commands in commandSandbox (narrowed to cmdPolicy's egress when it names
// domains), the worker's own state files protected. It reports whether commands are on, and returns a
// func to call when the worker stops.
func (f *workerFlags) openWorkspace(r *resolved, cfg *worker.Config, commandSandbox *workspace.Options, cmdPolicy *egress.Policy,
	ef *execFlags, log *slog.Logger) (bool, func(), error) {
	root, marker, err := f.workspaceRoot(r, true)
	if err != nil || root == "" {
		return false, func() {}, err
	}
	lockPath, err := r.lockPath()
	if err != nil {
		return false, nil, err
	}
	opts := workspace.Options{AllowWrites: f.writes, AllowCommands: f.commands, HomeDir: r.home,
		ProtectedPaths: append([]string{r.identityPath, marker, lockPath}, workspace.StatePaths(r.home)...)}
	switch box := f.commandSandbox(f.supervisor); {
	case box != "embedded" && box != "native-srt" && box != "runtime":
		return false, nil, fmt.Errorf("%w: --command-sandbox %q is not available (embedded, runtime)", worker.ErrConfig, f.commandBox)
	case box == "runtime" && f.commands:
		if opts.CommandRunner, err = f.runtimeCommands(r, root, cmdPolicy); err != nil {
			return false, nil, err
		}
	}
	var egressSB *sandbox.Sandbox // the commands' own, closed with the workspace
	if f.commands && commandSandbox != nil {
		opts.Sandbox = commandSandbox.Sandbox
		if !cmdPolicy.Empty() {
			if egressSB, err = commandEgressSandbox(ef, cmdPolicy, log); err != nil {
				return false, nil, fmt.Errorf("%w: %w", worker.ErrConfig, err)
			}
			opts.Sandbox = egressSB
			f.commandsEgress = opts.Sandbox.Report().Egress
		}
	}
	closeSB := func() {
		if egressSB != nil {
			egressSB.Close()
		}
	}
	ws, err := workspace.Open(root, opts)
	if err != nil {
		closeSB()
		return false, nil, fmt.Errorf("%w: %w", worker.ErrConfig, err)
	}
	name := f.workspaceName
	if name == "" {
		name = filepath.Base(root)
		if f.defaultWS {
			name = f.workspaceID
		}
	}
	cfg.Workspace, cfg.WorkspaceID, cfg.WorkspaceName, cfg.MarkerPath = ws, f.workspaceID, name, marker
	commandsOn := false
	for _, op := range ws.Operations() {
		commandsOn = commandsOn || op == workspace.OpExecuteCommand
	}
	return commandsOn, func() { ws.Close(); closeSB() }, nil
}

// supervisorName is --runtime-supervisor, defaulting to endpoint when an endpoint is set, else embedded.
func (f *workerFlags) supervisorName() string {
	switch {
	case f.supervisor != "":
		return f.supervisor
	case f.endpoint != "":
		return "endpoint"
	}
	return "embedded"
}

// workerMetrics is the worker's registry; the egress proxies count into it from their creation on.
func (f *execFlags) workerMetrics() *metrics.Worker {
	wm := metrics.NewWorker()
	f.egressMetrics.m.Store(wm.Runs)
	f.commandEgressMetrics.m.Store(wm.Commands)
	return wm
}

// startStatus serves --metrics-listen (if set) until the returned func, which waits for it to stop.
func (f *workerFlags) startStatus(w *worker.Worker, workerID, sup string, wm *metrics.Worker, log *slog.Logger) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := startWorkerStatus(ctx, f.metricsListen, wm, func() workerReadiness {
		return workerReadiness{Ready: w.Registered() && w.Connected(), WorkerID: workerID, Supervisor: sup, Egress: map[string]*egressStatus{
			"runs": newEgressStatus(f.runsEgress), "commands": newEgressStatus(f.commandsEgress)}}
	}, log)
	if err != nil {
		cancel()
		return nil, err
	}
	return func() { cancel(); wait() }, nil
}

// commandSandbox is --command-sandbox, defaulting to runtime under docker-nsjail (§12) and embedded elsewhere.
func (f *workerFlags) commandSandbox(sup string) string {
	if f.commandBox != "" {
		return f.commandBox
	}
	if sup == "docker-nsjail" || sup == "docker-macos-nsjail" {
		return "runtime"
	}
	return "embedded"
}

// runtimeCommands is the runtime command sandbox (§11.4): the docker-nsjail supervisor runs the workspace's
// commands in a container of their own, the root mounted at /mnt/workspace, authenticated by the HMAC token
// of the worker's private key (or static token) over the canonical root.
func (f *workerFlags) runtimeCommands(r *resolved, root string, cmdPolicy *egress.Policy) (workspace.CommandRunner, error) {
	if f.docker == nil {
		return nil, fmt.Errorf("%w: --command-sandbox runtime requires the docker-nsjail runtime supervisor", worker.ErrConfig)
	}
	if !cmdPolicy.Empty() {
		return nil, fmt.Errorf("%w: --command-allowed-domains needs --command-sandbox embedded: the runtime container has no network", worker.ErrConfig)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("%w: invalid workspace registration", worker.ErrConfig)
	}
	key := f.token
	if r.identity != nil {
		key = r.identity.PrivateKey
	}
	return f.docker.WorkspaceCommands(worker.WorkspaceMount{Root: real, Token: worker.WorkspaceCommandToken(key, real),
		SessionID: worker.WorkspaceCommandSession(r.workerID, f.workspaceID), ReadOnly: !f.writes})
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, l := range strings.Split(v, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
