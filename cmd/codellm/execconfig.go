package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/fleetkit"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/metrics"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/seal"
	"github.com/codellm/codellm/internal/slots"
)

// execFlags are the execution settings shared by serve, run, blocks and doctor, so that `codellm run`
// behaves exactly like the service with the same flags.
type execFlags struct {
	allowed       string
	interpreters  string
	sandboxMode   string
	network       bool
	networkAllow  string
	netMaxConns   int
	netMaxBytes   byteSize
	timeout       time.Duration
	maxOutput     byteSize
	maxStderr     byteSize
	maxBlocks     int
	maxConcurrent int
	queueTimeout  time.Duration
	exposeEnv     listFlag
	exposePrefix  prefixFlag
	memory        byteSize
	pids          int
	cpuTime       time.Duration
	tmpSize       byteSize
	workDir       string
	logFormat     string
	logLevel      string

	set map[string]bool // which flags were given (flag or environment)

	egressMetrics lazyEgressMetrics // wired to the server's registry once it exists
	fs            *flag.FlagSet     // for the trip2g aliases (resolveAliases)
	deterministic bool              // --deterministic (issue 21)
}

func (f *execFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	f.maxOutput = 10 << 20 // trip2g's default for the last block's stdout
	f.maxStderr = 64 << 10
	f.memory = byteSize(sandbox.DefaultMemory)
	f.tmpSize = byteSize(sandbox.DefaultTmpSize)
	fs.StringVar(&f.allowed, "allowed-programs", "", "comma-separated canonical program names to enable (absent: every installed interpreter; empty: execution disabled)")
	fs.StringVar(&f.interpreters, "interpreters", "", "JSON file replacing the embedded interpreter registry")
	fs.StringVar(&f.sandboxMode, "sandbox", "native", "sandbox mode: native (every mechanism or refuse), besteffort, off")
	fs.BoolVar(&f.network, "network", false, "give blocks network access (default: an empty network namespace)")
	fs.StringVar(&f.networkAllow, "network-allow", "", "comma-separated host names, *.suffix wildcards, IPs or CIDRs blocks may reach through codellm's filtering egress proxy (default: none)")
	fs.IntVar(&f.netMaxConns, "network-max-connections", egress.DefaultMaxConns, "egress connections per run (with --network-allow)")
	f.netMaxBytes = egress.DefaultMaxBytes
	fs.Var(&f.netMaxBytes, "network-max-bytes", "egress bytes per run, both directions (with --network-allow)")
	registerAlias(fs, "network")
	fs.BoolVar(&f.deterministic, "deterministic", false, "run every block reproducibly: fixed clock, seeded randomness, ASLR off (requests may turn it off or pick metadata.seed/now; needs the native sandbox and libfaketime)")
	fs.DurationVar(&f.timeout, "timeout", 300*time.Second, "whole-run timeout (requests may lower it)")
	fs.Var(&f.maxOutput, "max-output-bytes", "cap on captured stdout per block")
	registerAlias(fs, "max-output-bytes")
	fs.Var(&f.maxStderr, "max-stderr-bytes", "captured stderr per block; the last bytes are kept")
	fs.IntVar(&f.maxBlocks, "max-blocks", 64, "maximum code blocks per request")
	fs.IntVar(&f.maxConcurrent, "max-concurrent", 2*runtime.NumCPU(), "maximum concurrent runs")
	fs.DurationVar(&f.queueTimeout, "queue-timeout", 30*time.Second, "how long a run waits for a slot before 429")
	fs.Var(&f.exposeEnv, "expose-env", "expose this variable of codellm's environment to every block (repeatable, comma-separated)")
	fs.Var(&f.exposePrefix, "expose-env-prefix", "expose variables with this prefix (repeatable; CODELLM_* never)")
	fs.Var(&f.memory, "memory-limit", "memory limit per run, all blocks together, swap included")
	fs.IntVar(&f.pids, "pids-limit", sandbox.DefaultPids, "maximum tasks (processes and threads) per run")
	fs.DurationVar(&f.cpuTime, "cpu-time-limit", 0, "CPU time limit per process (RLIMIT_CPU backstop; 0: only the wall-clock timeout)")
	fs.Var(&f.tmpSize, "tmp-size", "size of each block's private scratch filesystems")
	fs.StringVar(&f.workDir, "work-dir", "", "parent directory of per-run workdirs (default: the system temp dir)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

func (f *execFlags) logger(w io.Writer) (*slog.Logger, error) {
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
	p, err := f.egressProxy(f.networkAllow, "blocks", log)
	if err != nil {
		return cfg, fmt.Errorf("--network-allow: %w", err)
	}
	cfg.Egress = egressOpener(p)
	return cfg, nil
}

// baseSandboxConfig is the sandbox configuration of the flags without any egress proxy.
func (f *execFlags) baseSandboxConfig(log *slog.Logger) (sandbox.Config, error) {
	mode, err := sandbox.ParseMode(f.sandboxMode)
	if err != nil {
		return sandbox.Config{}, err
	}
	if f.pids < 0 || f.memory < 0 || f.tmpSize < 0 {
		return sandbox.Config{}, errors.New("sandbox limits must not be negative")
	}
	cfg := sandbox.Config{
		Mode:    mode,
		Network: f.network,
		Logger:  log,
		Limits: sandbox.Limits{
			Memory:  int64(f.memory),
			Pids:    f.pids,
			CPUTime: f.cpuTime,
			TmpSize: int64(f.tmpSize),
		},
	}
	return cfg, nil
}

// egressProxy builds the filtering proxy for an allow-list with the per-run caps of the flags.
func (f *execFlags) egressProxy(list, who string, log *slog.Logger) (*egress.Proxy, error) {
	pol, err := egress.ParseList(list)
	if err != nil {
		return nil, err
	}
	if f.netMaxConns < 0 || f.netMaxBytes < 0 {
		return nil, errors.New("egress caps must not be negative")
	}
	log.Warn(who+" may reach these destinations through the egress proxy", "allow", strings.Join(pol.Entries(), ","))
	return egress.New(egress.Config{Policy: pol, MaxConns: f.netMaxConns, MaxBytes: int64(f.netMaxBytes),
		Logger: log, Metrics: &f.egressMetrics})
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
func (f *execFlags) build(log *slog.Logger) (engine.Config, *sandbox.Sandbox, error) {
	var ecfg engine.Config
	if f.fs != nil {
		if err := resolveAliases(f.fs, f.set, log); err != nil {
			return ecfg, nil, err
		}
	}
	reg := interp.Builtin()
	if f.interpreters != "" {
		r, err := interp.LoadFile(f.interpreters)
		if err != nil {
			return ecfg, nil, fmt.Errorf("--interpreters: %w", err)
		}
		reg = r
	}
	// fleetkit (trip2g's block helpers) on every python and node block's module path, read-only.
	kitDir, err := fleetkit.Materialise("")
	if err != nil {
		log.Warn("fleetkit unavailable: blocks that import it will fail", "err", err)
	} else {
		reg = fleetkit.Install(reg, kitDir)
	}
	var allowed []string
	if f.set["allowed-programs"] {
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
	if f.timeout <= 0 {
		return ecfg, nil, fmt.Errorf("--timeout must be positive, got %v", f.timeout)
	}
	if f.maxBlocks < 1 {
		return ecfg, nil, fmt.Errorf("--max-blocks must be at least 1, got %d", f.maxBlocks)
	}
	if f.maxConcurrent < 1 {
		return ecfg, nil, fmt.Errorf("--max-concurrent must be at least 1, got %d", f.maxConcurrent)
	}
	if f.maxOutput < 1 {
		return ecfg, nil, fmt.Errorf("--max-output-bytes must be positive")
	}
	scfg, err := f.sandboxConfig(log)
	if err != nil {
		return ecfg, nil, err
	}
	scfg.Shared = kitDir
	sb, err := sandbox.New(scfg)
	if err != nil {
		return ecfg, nil, fmt.Errorf("sandbox: %w", err)
	}
	switch sb.Mode() {
	case sandbox.ModeOff:
		log.Warn("sandbox is OFF (--sandbox off): blocks run unconfined as codellm's own user; use only where the container is the boundary")
	case sandbox.ModeBestEffort:
		if rep := sb.Report(); len(rep.Missing) > 0 {
			log.Warn("sandbox besteffort: some mechanisms are missing and will not be applied", "missing", fmt.Sprint(rep.Missing))
		}
	}
	if f.network {
		log.Warn("network access is enabled for blocks (--network)")
	}
	if missing := sb.DeterminismMissing(); f.deterministic && missing != "" {
		return ecfg, nil, fmt.Errorf("--deterministic: this host cannot run blocks deterministically: it needs %s", missing)
	}
	log.Info("programs enabled", "programs", fmt.Sprint(programs.Names()), "sandbox", string(sb.Mode()))
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
			MaxOutputBytes: int64(f.maxOutput),
			MaxStderrBytes: int64(f.maxStderr),
		},
		Slots:         slots.New(f.maxConcurrent, f.queueTimeout),
		Deterministic: f.deterministic,
		Timeout:       f.timeout,
		MaxBlocks:     f.maxBlocks,
	}
	return ecfg, sb, nil
}
