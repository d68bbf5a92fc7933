package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/fleetkit"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/metrics"
	"github.com/codellm/codellm/internal/packages"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/scratch"
	"github.com/codellm/codellm/internal/seal"
	"github.com/codellm/codellm/internal/slots"
)

// execFlags are the execution settings shared by serve, run, debug, blocks, doctor and worker run
// (execSettings), so that `codellm run` behaves exactly like the service with the same flags.
type execFlags struct {
	allowed       string
	interpreters  string
	sandboxMode   string
	network       bool
	networkAllow  string
	netMaxConns   int
	netMaxOpen    int
	netMaxBytes   int64
	timeout       time.Duration
	maxOutput     int64
	maxStderr     int64
	maxBlocks     int
	maxConcurrent int
	queueTimeout  time.Duration
	exposeEnv     []string
	exposePrefix  []string
	memory        int64
	pids          int
	cpuTime       time.Duration
	tmpSize       int64
	workDir       string
	logFormat     string
	logLevel      string
	deterministic bool
	goHelper      bool // sandbox.Config.GoHelper
	packagesDir   string
	packageSets   []packages.Set // read by build from packagesDir, for the runner's /api/v2/packages

	v *config.Values // every loaded setting of the command: which were given, the warnings

	egressMetrics lazyEgressMetrics // wired to the server's registry once it exists
	// commandEgressMetrics counts the worker's workspace-command proxy (--command-allowed-domains).
	commandEgressMetrics lazyEgressMetrics
}

func (f *execFlags) register(fs *flag.FlagSet) { register(fs, execSettings(), f.bind) }

func (f *execFlags) bind(v *config.Values) {
	f.v = v
	f.allowed, f.interpreters, f.sandboxMode = v.String("allowed-programs"), v.String("interpreters"), v.String("sandbox")
	f.network, f.networkAllow, f.deterministic = v.Bool("network"), v.String("network-allow"), v.Bool("deterministic")
	f.goHelper = v.Bool("go-helper")
	f.netMaxConns, f.netMaxBytes = v.Int("network-max-connections"), v.Size("network-max-bytes")
	f.netMaxOpen = v.Int("network-max-proxy-connections")
	f.timeout, f.queueTimeout, f.cpuTime = v.Duration("timeout"), v.Duration("queue-timeout"), v.Duration("cpu-time-limit")
	f.maxOutput, f.maxStderr = v.Size("max-output-bytes"), v.Size("max-stderr-bytes")
	f.maxBlocks, f.maxConcurrent, f.pids = v.Int("max-blocks"), v.Int("max-concurrent"), v.Int("pids-limit")
	if !v.IsSet("max-concurrent") {
		f.maxConcurrent = 2 * runtime.NumCPU() // the default depends on the host, so the table cannot hold it
	}
	f.exposeEnv, f.exposePrefix = v.List("expose-env"), v.List("expose-env-prefix")
	f.memory, f.tmpSize, f.workDir = v.Size("memory-limit"), v.Size("tmp-size"), v.String("work-dir")
	f.logFormat, f.logLevel = v.String("log-format"), v.String("log-level")
	f.packagesDir = v.String("packages-dir")
}

// logger builds the command's logger from --log-format and --log-level and logs the configuration's
// warnings (two spellings of a setting that differ) with it.
func (f *execFlags) logger(w io.Writer) (*slog.Logger, error) {
	log, err := f.newLogger(w)
	if err == nil && f.v != nil {
		f.v.Warn(log)
	}
	return log, err
}

func (f *execFlags) newLogger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
}

func (f *execFlags) sandboxConfig(log *slog.Logger) (sandbox.Config, error) {
	cfg, err := f.baseSandboxConfig(log)
	if err != nil || strings.TrimSpace(f.networkAllow) == "" {
		return cfg, err
	}
	if f.network {
		return cfg, errors.New("--network-allow and --network exclude each other: --network gives blocks the host's network unfiltered")
	}
	p, rep, err := f.egressProxy(f.networkAllow, "blocks", log, &f.egressMetrics)
	if err != nil {
		return cfg, fmt.Errorf("--network-allow: %w", err)
	}
	cfg.Egress, cfg.EgressReport = egressOpener(p), rep
	return cfg, nil
}

// baseSandboxConfig is the sandbox configuration of the flags without any egress proxy.
func (f *execFlags) baseSandboxConfig(log *slog.Logger) (sandbox.Config, error) {
	mode, err := sandbox.ParseMode(f.sandboxMode)
	if err != nil {
		return sandbox.Config{}, fmt.Errorf("--sandbox: %w", err)
	}
	if f.pids < 0 || f.memory < 0 || f.tmpSize < 0 {
		return sandbox.Config{}, errors.New("sandbox limits must not be negative")
	}
	cfg := sandbox.Config{
		Mode:    mode,
		Network: f.network,
		Logger:  log,
		Limits: sandbox.Limits{
			Memory:  f.memory,
			Pids:    f.pids,
			CPUTime: f.cpuTime,
			TmpSize: f.tmpSize,
		},
	}
	return cfg, nil
}

// egressProxy builds the filtering proxy for an allow-list with the per-run caps of the flags, counting
// into m, and the sandbox report row that describes it (doctor, /readyz).
func (f *execFlags) egressProxy(list, who string, log *slog.Logger, m egress.Metrics) (*egress.Proxy, *sandbox.EgressReport, error) {
	pol, err := egress.ParseList(list)
	if err != nil {
		return nil, nil, err
	}
	if f.netMaxConns < 0 || f.netMaxBytes < 0 || f.netMaxOpen < 0 {
		return nil, nil, errors.New("egress caps must not be negative")
	}
	log.Warn(who+" may reach these destinations through the egress proxy", "allow", strings.Join(pol.Entries(), ","), "digest", pol.Digest())
	p, err := egress.New(egress.Config{Policy: pol, MaxConns: f.netMaxConns, MaxOpen: f.netMaxOpen, MaxBytes: f.netMaxBytes,
		Logger: log, Metrics: m})
	if err != nil {
		return nil, nil, err
	}
	conns, bytes := p.Limits()
	return p, &sandbox.EgressReport{Allow: pol.Entries(), Digest: pol.Digest(), MaxConnections: conns,
		MaxProxyConnections: p.MaxOpen(), MaxBytes: bytes}, nil
}

// egressOpener adapts a proxy to the sandbox's per-run hook.
func egressOpener(p *egress.Proxy) func(string, []string) (sandbox.EgressRun, error) {
	return func(runID string, narrow []string) (sandbox.EgressRun, error) {
		s, err := p.Open(runID, narrow)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// lazyEgressMetrics forwards to the service's egress metrics once the server that owns the registry has
// been built (the sandbox, and so the proxy, exists before it).
type lazyEgressMetrics struct {
	m atomic.Pointer[metrics.Egress]
}

func (l *lazyEgressMetrics) Connection(decision, reason string) {
	if m := l.m.Load(); m != nil {
		m.Connection(decision, reason)
	}
}

func (l *lazyEgressMetrics) Bytes(direction string, n int64) {
	if m := l.m.Load(); m != nil {
		m.Bytes(direction, n)
	}
}

// build turns the flags into a sandbox and an engine configuration. Every mistake is a startup error that
// names the flag or entry.
// openScratch moves a long-running command's per-run scratch (the pipeline's block directories, the
// runner's private directory) onto a private tmpfs below --work-dir when that is a disk filesystem and
// codellm may mount (package scratch); f.workDir is the scratch directory from then on. Close it after the
// runner and the Sandbox.
func (f *execFlags) openScratch(log *slog.Logger) (*scratch.Dir, error) {
	sc, err := scratch.Open(f.workDir, log)
	if err != nil {
		return nil, fmt.Errorf("--work-dir: %w", err)
	}
	f.workDir = sc.Path
	return sc, nil
}

func (f *execFlags) build(log *slog.Logger) (engine.Config, *sandbox.Sandbox, error) {
	var ecfg engine.Config
	reg, shared, err := f.registry(log)
	if err != nil {
		return ecfg, nil, err
	}
	var allowed []string
	if f.v != nil && f.v.IsSet("allowed-programs") {
		allowed = interp.ParseAllowed(f.allowed, true)
	}
	programs, err := interp.Enable(reg, allowed, nil)
	if err != nil {
		return ecfg, nil, fmt.Errorf("--allowed-programs: %w", err)
	}
	exposed, err := interp.Exposed(os.Environ(), f.exposeEnv, f.exposePrefix, reg)
	if err != nil {
		return ecfg, nil, err
	}
	if what, covers := seal.CoversKey(f.exposeEnv, f.exposePrefix); covers {
		return ecfg, nil, fmt.Errorf("%s would hand the seal key (%s) to every block, letting any role open any sealed secret",
			what, seal.DefaultKeyEnv)
	}
	if err := f.checkLimits(); err != nil {
		return ecfg, nil, err
	}
	scfg, err := f.sandboxConfig(log)
	if err != nil {
		return ecfg, nil, err
	}
	scfg.Shared = shared
	scfg.GoHelper = f.goHelper
	sb, err := f.newSandbox(scfg, log)
	if err != nil {
		return ecfg, nil, err
	}
	chat, runnerOnly := programGroups(programs)
	log.Info("programs enabled", "chat", fmt.Sprint(chat), "runner_api_only", fmt.Sprint(runnerOnly),
		"not_installed", fmt.Sprint(programs.Skipped()), "sandbox", string(sb.Mode()))
	var pol *egress.Policy
	if scfg.Egress != nil {
		pol, _ = egress.ParseList(f.networkAllow) // validated by sandboxConfig
	}
	ecfg = engine.Config{
		NetworkAllow: pol,
		Programs:     programs,
		Exposed:      exposed,
		Pipeline: pipeline.Config{
			Sandbox:        sb,
			WorkRoot:       f.workDir,
			MaxOutputBytes: f.maxOutput,
			MaxStderrBytes: f.maxStderr,
		},
		Slots:         slots.New(f.maxConcurrent, f.queueTimeout),
		Deterministic: f.deterministic,
		Timeout:       f.timeout,
		MaxBlocks:     f.maxBlocks,
	}
	return ecfg, sb, nil
}

// programGroups splits the enabled programs into those a chat block may run and the compiled ones only
// the runner API runs (it has the compile step; chat refuses their blocks), so that the start-up line
// promises chat nothing it will refuse.
func programGroups(p *interp.Programs) (chat, runnerOnly []string) {
	for _, name := range p.Names() {
		if in, ok := p.Registry().ByName(name); ok && in.Compiled() {
			runnerOnly = append(runnerOnly, name)
		} else {
			chat = append(chat, name)
		}
	}
	return chat, runnerOnly
}

// registry is the interpreter registry of --interpreters (or the embedded one) with fleetkit (trip2g's
// block helpers) and the operator's package sets (--packages-dir) on every python and node block's module
// path, read-only; shared is the directory the sandbox shows blocks at sandbox.SharedMount ("" for none):
// fleetkit's own directory, or the package directory with fleetkit linked into it.
func (f *execFlags) registry(log *slog.Logger) (reg *interp.Registry, shared string, err error) {
	reg = interp.Builtin()
	if f.interpreters != "" {
		if reg, err = interp.LoadFile(f.interpreters); err != nil {
			return nil, "", fmt.Errorf("--interpreters: %w", err)
		}
	}
	if f.packagesDir != "" {
		return f.withPackages(reg, log)
	}
	kitDir, err := fleetkit.Materialise("")
	if err != nil {
		log.Warn("fleetkit unavailable: blocks that import it will fail", "err", err)
		return reg, "", nil
	}
	return fleetkit.Install(reg, kitDir), kitDir, nil
}

// withPackages puts fleetkit and every package set of --packages-dir on the module paths, the directory
// being the blocks' shared mount. A package directory that cannot hold fleetkit, or a set without its
// manifest, stops the start: the operator asked for them.
func (f *execFlags) withPackages(reg *interp.Registry, log *slog.Logger) (*interp.Registry, string, error) {
	dir, err := filepath.Abs(f.packagesDir)
	if err != nil {
		return nil, "", fmt.Errorf("--packages-dir: %w", err)
	}
	sets, err := packages.List(dir)
	if err != nil {
		return nil, "", fmt.Errorf("--packages-dir: %w", err)
	}
	kitDir, err := fleetkit.Materialise(dir)
	if err == nil {
		err = packages.LinkKit(dir, kitDir)
	}
	if err != nil {
		return nil, "", fmt.Errorf("--packages-dir: %w", err)
	}
	f.packageSets = sets
	names := make([]string, len(sets))
	for i, s := range sets {
		names[i] = s.Name + " (" + s.Language + ")"
	}
	log.Info("package sets on the blocks' module paths, read-only", "dir", dir, "sets", strings.Join(names, ", "))
	return packages.Install(fleetkit.Install(reg, dir), dir, sets), dir, nil
}

// checkLimits refuses run limits that cannot work.
func (f *execFlags) checkLimits() error {
	switch {
	case f.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %v", f.timeout)
	case f.maxBlocks < 1:
		return fmt.Errorf("--max-blocks must be at least 1, got %d", f.maxBlocks)
	case f.maxConcurrent < 1:
		return fmt.Errorf("--max-concurrent must be at least 1, got %d", f.maxConcurrent)
	case f.maxOutput < 1:
		return fmt.Errorf("--max-output-bytes must be positive")
	case f.deterministic && (f.network || f.networkAllow != ""):
		// Every run would be refused (sandbox.ErrDeterministicNetwork) unless it narrowed its network away.
		return fmt.Errorf("--deterministic cannot be the default with --network or --network-allow: %v; "+
			"drop --deterministic (a request may still ask for it with metadata.network_allow \"\")", sandbox.ErrDeterministicNetwork)
	}
	return nil
}

// errCgoBuild is why a cgo build of codellm does not run the native sandbox.
var errCgoBuild = errors.New("this codellm was built with cgo, which cannot confine every thread of a block's init " +
	"(no syscall.AllThreadsSyscall): build it with CGO_ENABLED=0 (make build, `CGO_ENABLED=0 go install`) or use a release binary")

// newSandbox opens the sandbox and says what it leaves out (off, besteffort's missing mechanisms, the
// network); --deterministic on a host that cannot is an error.
func (f *execFlags) newSandbox(scfg sandbox.Config, log *slog.Logger) (*sandbox.Sandbox, error) {
	if cgoBuild && scfg.Mode == sandbox.ModeNative {
		return nil, unavailable(errCgoBuild)
	}
	if cgoBuild && scfg.Mode == sandbox.ModeBestEffort {
		log.Warn("sandbox besteffort: " + errCgoBuild.Error())
	}
	sb, err := sandbox.New(scfg)
	if err != nil {
		return nil, unavailable(fmt.Errorf("sandbox: %w", err))
	}
	switch sb.Mode() {
	case sandbox.ModeOff:
		log.Warn("sandbox is OFF (--sandbox off): blocks run unconfined as codellm's own user; use only where the container is the boundary")
	case sandbox.ModeBestEffort:
		if rep := sb.Report(); len(rep.Missing) > 0 {
			log.Warn("sandbox besteffort: some mechanisms are missing and will not be applied", "missing", fmt.Sprint(rep.Missing))
			for _, w := range rep.Warnings {
				if strings.HasPrefix(w, sandbox.WarnWithoutUserNS) {
					log.Error(w) // not silent: the largest part of the sandbox is gone
				}
			}
		}
	}
	if f.network {
		log.Warn("network access is enabled for blocks (--network)")
	}
	if missing := sb.DeterminismMissing(); f.deterministic && missing != "" {
		sb.Close()
		return nil, unavailable(fmt.Errorf("--deterministic: this host cannot run blocks deterministically: it needs %s", missing))
	}
	return sb, nil
}
