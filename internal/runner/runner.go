package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/execution"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/packages"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/slots"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxRunTimeout    = 300 * time.Second
	DefaultMaxOutputBytes   = 1 << 20
	DefaultMaxBodyBytes     = 10 << 20
	DefaultSessionTTL       = 30 * time.Minute
	DefaultMaxSessions      = 64
	DefaultEvictIdle        = 5 * time.Minute
	DefaultFilesOutMaxBytes = 1 << 20
	DefaultFilesOutMaxCount = 32
)

// Fixed bounds that are not worth a flag.
const (
	maxFiles    = 256     // files per request
	maxArgs     = 4096    // args per request
	maxEnvBytes = 1 << 20 // env_vars in total (runner API §11.5)
	// execve refuses (E2BIG) one string over MAX_ARG_STRLEN (32 pages, NUL included) and argv+envp over a
	// quarter of the stack limit (2 MiB at the usual 8 MiB). Each string is held to the first, and args
	// (512 KiB) plus env_vars (1 MiB) plus codellm's own few variables stay below the second, so a request
	// within these limits never reaches execve's E2BIG.
	maxArgStrlen    = 32*4096 - 1
	maxArgBytes     = 512 << 10
	maxSessionIDLen = 256   // X-Runtime-Session-Id
	maxScanEntries  = 20000 // directory entries examined for files out
	killGrace       = 5 * time.Second
	// WorkDir is where a program finds its workspace (session or one-off) inside a native sandbox: the
	// path LibreChat's tool prompt tells models to write to. Without a private root it is the host path.
	WorkDir          = "/mnt/data"
	versionProbeTime = 10 * time.Second
)

// Config configures a Runner. Programs, Sandbox and Slots are required.
type Config struct {
	// Packages are the operator's package sets the blocks import (GET /api/v2/packages lists them).
	Packages []packages.Set
	Programs *interp.Programs // enabled interpreters (its Registry supplies languages and aliases)
	Sandbox  *sandbox.Sandbox // every execute runs in it
	Slots    *slots.Pool      // the server's one concurrency bound; one slot per execute
	Exposed  []string         // operator-exposed "NAME=value" entries (interp.Exposed)

	// WorkRoot is where the runner makes its own private directory (sessions and one-off runs). It and its
	// parents must be searchable by the sandbox's unprivileged uid. Default: os.TempDir().
	WorkRoot string

	MaxRunTimeout  time.Duration // cap (and default) of run_timeout; default 300 s
	MaxMemory      int64         // cap (and default) of run_memory_limit; default the sandbox's memory limit
	MaxOutputBytes int64         // per stream (stdout, stderr); default 1 MiB
	MaxBodyBytes   int64         // request body; default 10 MiB

	SessionTTL  time.Duration // idle time after which a session is deleted; default 30 min
	MaxSessions int           // live sessions at once; default 64
	// MaxSessionsPerOwner bounds the sessions of one credential (the Authorization header or client
	// certificate that created them, or the owner an in-process caller names with WithOwner: the bridge
	// worker's hub tenant; other requests without either are not counted); default half of MaxSessions.
	// At this cap a new session evicts the owner's least recently used session idle for EvictIdle, else 429.
	MaxSessionsPerOwner int
	// EvictIdle is how long a session must have been idle before a full table, or its owner's full share,
	// evicts it (least recently used first) for a new one, instead of answering 429 until SessionTTL;
	// default 5 min.
	EvictIdle time.Duration

	// WorkspaceSize, when > 0, bounds every workspace (session or one-off) to that many bytes and one
	// inode per 4 KiB, so a run cannot fill the host disk through its workspace. A root codellm mounts a
	// tmpfs of that size on each host workspace, bind-mounted read-write into the sandbox. Otherwise (not
	// root, or the mount refused) each stage runs in a private workdir tmpfs of that size inside the
	// sandbox (Spec.WorkdirSize), copied in from the host directory and, for sessions and compile
	// stages, copied back when the program is over (see private.go); this needs the sandbox's private
	// root, and without one the workspace stays a host directory (logged once). 0: workspaces are plain
	// host directories under WorkRoot, bounded only per file by the sandbox's file size limit.
	WorkspaceSize int64
	// privateWorkspace forces the private mode even for root (tests of a non-root runner).
	privateWorkspace bool

	FilesOutMaxBytes int64 // content is returned for changed files up to this size; default 1 MiB
	FilesOutMaxCount int   // at most this many changed files are listed; default 32

	// Versions overrides the probed version of a program (canonical name → version). Programs not listed
	// are probed once with `cmd --version`.
	Versions map[string]string

	// Deterministic is the operator's default for deterministic mode (--deterministic); a request's
	// metadata.deterministic overrides it (see determinism).
	Deterministic bool

	// NetworkAllow is the operator's egress allow-list (the sandbox's Config.Egress policy; nil: none). A
	// request's metadata.network_allow may only narrow it (see networkAllow).
	NetworkAllow *egress.Policy

	// Kills counts each compile or run stage a limit or codellm ended in codellm_kills_total, as chat
	// runs' blocks are (the server's metrics.Service; nil: not counted).
	Kills execution.KillCounter

	Logger *slog.Logger
}

// Runtime is one installed language as GET /api/v2/runtimes lists it, under Piston's names: Language
// is Piston's language ("javascript"), Runtime the package providing it when that differs ("node"),
// and Aliases Piston's aliases plus the registry's code block labels (codellm's canonical name among them).
type Runtime struct {
	Language string   `json:"language"`
	Version  string   `json:"version"`
	Aliases  []string `json:"aliases"`
	Runtime  string   `json:"runtime,omitempty"`

	interp interp.Interpreter
	path   string // absolute cmd[0]
}

// Runner executes Piston-style requests in the sandbox and keeps stateful session workspaces.
type Runner struct {
	cfg      Config
	log      *slog.Logger
	dir      string   // private root: <WorkRoot>/codellm-runner-*
	sessDir  string   // <dir>/sessions
	runsDir  string   // <dir>/runs
	lock     *os.File // flock on <dir>/.lock while the runner lives (see sweepStale)
	runtimes []Runtime

	reserved map[string]string // env name → why a request may not set it

	base     context.Context // canceled by Close: every in-flight execute derives from it
	stop     context.CancelFunc
	inflight sync.WaitGroup
	janitor  sync.WaitGroup

	// private: WorkspaceSize is enforced by the sandbox's private tmpfs, not a mount (see private.go);
	// mounted: by a tmpfs on each host workspace.
	private, mounted bool
	unbounded        sync.Once // the warning that a private-mode run could not be bounded
	// afterRun, a test seam, sees the host workspace right after the run stage (before files out).
	afterRun func(dir string)

	mu       sync.Mutex
	closed   bool
	seq      uint64
	sessions map[string]*session
}

// New validates cfg, creates the runner's private directory, probes the installed versions and starts the
// session janitor. Close releases all of it.
func New(cfg Config) (*Runner, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	r := &Runner{cfg: cfg, log: lg, sessions: map[string]*session{}}
	r.reserved = reservedEnv(cfg.Programs.Registry(), cfg.Exposed)
	r.runtimes = probeRuntimes(cfg.Programs, cfg.Versions, lg)
	if err := r.openWorkDir(); err != nil {
		return nil, err
	}
	r.chooseBound()
	r.base, r.stop = context.WithCancel(context.Background())
	r.janitor.Add(1)
	go r.janitorLoop()
	return r, nil
}

// complete refuses a configuration without its dependencies or with a negative limit, and fills in the
// defaults.
func (cfg *Config) complete() error {
	switch {
	case cfg.Programs == nil:
		return errors.New("runner: Config.Programs is required")
	case cfg.Sandbox == nil:
		return errors.New("runner: Config.Sandbox is required")
	case cfg.Slots == nil:
		return errors.New("runner: Config.Slots is required")
	case cfg.MaxRunTimeout < 0, cfg.MaxMemory < 0, cfg.MaxOutputBytes < 0, cfg.MaxBodyBytes < 0,
		cfg.SessionTTL < 0, cfg.MaxSessions < 0, cfg.FilesOutMaxBytes < 0, cfg.FilesOutMaxCount < 0,
		cfg.MaxSessionsPerOwner < 0, cfg.EvictIdle < 0,
		cfg.WorkspaceSize < 0:
		return errors.New("runner: negative limit in Config")
	}
	if cfg.MaxRunTimeout == 0 {
		cfg.MaxRunTimeout = DefaultMaxRunTimeout
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = cfg.Sandbox.Config().Limits.Memory
	}
	if cfg.MaxOutputBytes == 0 {
		cfg.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxSessionsPerOwner == 0 {
		cfg.MaxSessionsPerOwner = max(cfg.MaxSessions/2, 1)
	}
	if cfg.EvictIdle == 0 {
		cfg.EvictIdle = DefaultEvictIdle
	}
	if cfg.FilesOutMaxBytes == 0 {
		cfg.FilesOutMaxBytes = DefaultFilesOutMaxBytes
	}
	if cfg.FilesOutMaxCount == 0 {
		cfg.FilesOutMaxCount = DefaultFilesOutMaxCount
	}
	if cfg.WorkRoot == "" {
		cfg.WorkRoot = os.TempDir()
	}
	if !filepath.IsAbs(cfg.WorkRoot) {
		return fmt.Errorf("runner: WorkRoot %q is not absolute", cfg.WorkRoot)
	}
	return nil
}

// openWorkDir creates, locks and checks the runner's own work directory under WorkRoot (removing those
// of dead runners). On failure nothing is left.
func (r *Runner) openWorkDir() error {
	dir, err := os.MkdirTemp(r.cfg.WorkRoot, "codellm-runner-")
	if err != nil {
		return fmt.Errorf("runner: create work directory: %w", err)
	}
	// 0711: the sandbox uid must traverse to a workspace, but must not list which sessions exist.
	r.dir, r.sessDir, r.runsDir = dir, filepath.Join(dir, "sessions"), filepath.Join(dir, "runs")
	for _, d := range []string{dir, r.sessDir, r.runsDir} {
		if err := os.Mkdir(d, 0o711); err != nil && !os.IsExist(err) {
			os.RemoveAll(dir)
			return fmt.Errorf("runner: create work directory: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("runner: create work directory: %w", err)
		}
	}
	lock, err := lockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("runner: lock work directory: %w", err)
	}
	r.lock = lock
	// Leftovers of runners that died without Close (crash, SIGKILL) hold users' files: remove them.
	removed, errs := sweepStale(r.cfg.WorkRoot, dir)
	for _, d := range removed {
		r.log.Info("runner: removed the work directory of a dead runner", "dir", d)
	}
	for _, e := range errs {
		r.log.Warn("runner: cannot remove the work directory of a dead runner", "err", e)
	}
	if err := checkSearchable(dir, r.cfg.Sandbox); err != nil {
		r.unlock()
		os.RemoveAll(dir)
		return err
	}
	return nil
}

// chooseBound picks how WorkspaceSize is enforced: a tmpfs mounted on each workspace when this process may
// mount one (probed once, so a refused mount shows at startup, not on every execute), else the sandbox's
// private tmpfs.
func (r *Runner) chooseBound() {
	size := r.cfg.WorkspaceSize
	if size == 0 {
		return
	}
	err := errors.New("not root")
	if os.Geteuid() == 0 && !r.cfg.privateWorkspace {
		probe := filepath.Join(r.runsDir, "probe")
		if err = os.Mkdir(probe, 0o700); err == nil {
			if err = mountQuota(probe, size); err == nil {
				err = unmountQuota(probe)
			}
			os.Remove(probe)
		}
	}
	if err == nil {
		r.mounted = true
		return
	}
	r.private = true
	r.log.Info("runner: workspaces are bounded by the sandbox's private tmpfs (copied in, and out for sessions)",
		"size", size, "why_not_mounted", err.Error())
}

// Close stops the janitor, kills every in-flight execute, waits for them and removes every session and
// run directory. It is idempotent.
func (r *Runner) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.stop()
	r.janitor.Wait()
	r.inflight.Wait()
	r.mu.Lock()
	live := r.sessions
	r.sessions = map[string]*session{}
	r.mu.Unlock()
	for _, s := range live {
		r.removeDir(s.dir)
	}
	if err := os.RemoveAll(r.dir); err != nil {
		r.log.Error("runner: remove work directory", "dir", r.dir, "err", err)
	}
	r.unlock()
}

func (r *Runner) unlock() {
	if r.lock != nil {
		r.lock.Close()
		r.lock = nil
	}
}

// checkSearchable fails closed when the sandbox would drop to an unprivileged uid that cannot reach the
// workspaces: every execute would fail at start, so say so once, at startup, naming the directory.
func checkSearchable(dir string, sb *sandbox.Sandbox) error {
	if sb.Mode() == sandbox.ModeOff || os.Geteuid() != 0 {
		return nil // off runs as codellm's own user; an unprivileged codellm maps its own uid
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("runner: WorkRoot: %w", err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("runner: WorkRoot: %s (mode %v) is not searchable by the sandbox's unprivileged user; "+
				"choose a WorkRoot whose parents all have o+x, e.g. under /tmp or /var/lib", d, st.Mode().Perm())
		}
		if d == "/" {
			return nil
		}
	}
}

// Runtimes returns what GET /api/v2/runtimes lists: every enabled interpreter with its installed version.
func (r *Runner) Runtimes() []Runtime {
	out := make([]Runtime, len(r.runtimes))
	for i, rt := range r.runtimes {
		out[i] = rt
		out[i].Aliases = slices.Clone(rt.Aliases)
	}
	return out
}

// reservedEnv lists the names env_vars may not set: the fixed child variables (§7), those an interpreter
// entry sets and the operator's exposures — a request must never change what the operator configured.
func reservedEnv(reg *interp.Registry, exposed []string) map[string]string {
	m := map[string]string{}
	for _, n := range interp.Reserved {
		m[n] = "set by codellm for every run"
	}
	for _, in := range reg.Interpreters() {
		for _, e := range in.Env {
			m[e.Name] = "set by interpreter " + in.Name
		}
	}
	for _, kv := range exposed {
		if n, _, ok := strings.Cut(kv, "="); ok {
			m[n] = "exposed by the operator"
		}
	}
	return m
}

var versionRE = regexp.MustCompile(`\d+\.\d+(?:\.\d+)?`)

// versionCache remembers probes process-wide: a program's version does not change while codellm runs,
// and tests create many runners.
var versionCache sync.Map // "path\x00cmd…" → string

// probeRuntimes runs `cmd --version` for every enabled program (in parallel, outside any request) and
// keeps the first dotted number it prints, normalised to three components. A program whose probe fails is
// listed as 0.0.0 and logged: it is installed (it resolved) but says nothing we understand.
func probeRuntimes(progs *interp.Programs, override map[string]string, lg *slog.Logger) []Runtime {
	reg := progs.Registry()
	var out []Runtime
	for _, in := range reg.Interpreters() {
		path := progs.Path(in.Name)
		if path == "" {
			continue
		}
		out = append(out, pistonRuntime(in, path))
	}
	var wg sync.WaitGroup
	for i := range out {
		rt := &out[i]
		if v, ok := override[rt.Language]; ok {
			rt.Version = v
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := rt.path + "\x00" + strings.Join(slices.Concat(rt.interp.Cmd, rt.interp.VersionArgs), "\x00")
			if v, ok := versionCache.Load(key); ok {
				rt.Version = v.(string)
				return
			}
			v, err := probeVersion(rt.path, rt.interp.Cmd, rt.interp.VersionArgs)
			if err != nil {
				lg.Warn("runner: cannot determine program version; listing 0.0.0", "program", rt.Language, "err", err)
				rt.Version = "0.0.0"
				return
			}
			versionCache.Store(key, v)
			rt.Version = v
		}()
	}
	wg.Wait()
	return out
}

func probeVersion(path string, cmd, versionArgs []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), versionProbeTime)
	defer cancel()
	if len(versionArgs) == 0 {
		versionArgs = []string{"--version"}
	}
	c := exec.CommandContext(ctx, path, append(slices.Clone(cmd[1:]), versionArgs...)...)
	c.Env = []string{"PATH=" + interp.ChildPATH, "LANG=C.UTF-8"}
	c.Dir = "/"
	out, err := c.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	m := versionRE.Find(out)
	if m == nil {
		return "", fmt.Errorf("%s --version printed no version number", path)
	}
	v := string(m)
	if strings.Count(v, ".") == 1 {
		v += ".0"
	}
	return v, nil
}
