package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Mode selects how much confinement a Sandbox applies.
type Mode string

const (
	ModeNative     Mode = "native"     // default: every mechanism or refuse (*UnavailableError)
	ModeBestEffort Mode = "besteffort" // apply what the host supports; log once per missing mechanism
	ModeOff        Mode = "off"        // no confinement (plain exec in its own process group); explicit
)

// ParseMode accepts the three documented spellings (and "" for the default).
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeNative:
		return ModeNative, nil
	case ModeBestEffort, ModeOff:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w: unknown sandbox mode %q (want native, besteffort or off)", ErrInvalidConfig, s)
}

// Defaults for Limits fields left zero. They are documented in the README.
const (
	DefaultMemory    int64 = 512 << 20
	DefaultPids            = 256
	DefaultTmpSize   int64 = 64 << 20
	DefaultFileSize  int64 = 64 << 20
	DefaultOpenFiles       = 1024
)

// Limits apply to a whole Run (all blocks of one pipeline together, via the
// run's cgroup), with rlimits per process as a backstop. Zero values mean
// "use the Config default".
type Limits struct {
	Memory    int64         // bytes, including swap (default 512 MiB)
	Pids      int           // tasks+threads of the whole run (default 256)
	CPUTime   time.Duration // RLIMIT_CPU per process backstop (default 0 = none beyond the wall timeout)
	TmpSize   int64         // size of each private tmpfs (workdir scratch and /tmp) (default 64 MiB)
	FileSize  int64         // RLIMIT_FSIZE (default 64 MiB)
	OpenFiles int           // RLIMIT_NOFILE (default 1024)
	// NetworkAllow narrows Config.Egress's allow-list for one run: nil is
	// the whole list, otherwise a subset of it (an empty one allows
	// nothing). A pointer keeps Limits comparable.
	NetworkAllow *[]string
}

// withDefaults fills zero fields from d.
func (l Limits) withDefaults(d Limits) Limits {
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.CPUTime == 0 {
		l.CPUTime = d.CPUTime
	}
	if l.TmpSize == 0 {
		l.TmpSize = d.TmpSize
	}
	if l.FileSize == 0 {
		l.FileSize = d.FileSize
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = d.OpenFiles
	}
	if l.NetworkAllow == nil {
		l.NetworkAllow = d.NetworkAllow
	}
	return l
}

func (l Limits) validate() error {
	switch {
	case l.Memory < 0:
		return fmt.Errorf("%w: memory limit %d is negative", ErrInvalidConfig, l.Memory)
	case l.Memory > 0 && l.Memory < 4<<20:
		return fmt.Errorf("%w: memory limit %d bytes is below 4 MiB; no interpreter starts with that", ErrInvalidConfig, l.Memory)
	case l.Pids < 0:
		return fmt.Errorf("%w: pids limit %d is negative", ErrInvalidConfig, l.Pids)
	case l.CPUTime < 0:
		return fmt.Errorf("%w: CPU time limit %v is negative", ErrInvalidConfig, l.CPUTime)
	case l.CPUTime > 0 && l.CPUTime < time.Second:
		return fmt.Errorf("%w: CPU time limit %v is below the 1s granularity of RLIMIT_CPU", ErrInvalidConfig, l.CPUTime)
	case l.TmpSize < 0:
		return fmt.Errorf("%w: tmp size %d is negative", ErrInvalidConfig, l.TmpSize)
	case l.FileSize < 0:
		return fmt.Errorf("%w: file size limit %d is negative", ErrInvalidConfig, l.FileSize)
	case l.OpenFiles < 0:
		return fmt.Errorf("%w: open files limit %d is negative", ErrInvalidConfig, l.OpenFiles)
	case l.OpenFiles > 0 && l.OpenFiles < 16:
		return fmt.Errorf("%w: open files limit %d is below 16; interpreters need a few descriptors to start", ErrInvalidConfig, l.OpenFiles)
	}
	return nil
}

// DefaultLimits returns the documented defaults.
func DefaultLimits() Limits {
	return Limits{Memory: DefaultMemory, Pids: DefaultPids, TmpSize: DefaultTmpSize, FileSize: DefaultFileSize, OpenFiles: DefaultOpenFiles}
}

// Config is the per-server sandbox policy.
type Config struct {
	Mode    Mode
	Limits  Limits
	Network bool         // false (default): empty network namespace; Landlock TCP denied
	Logger  *slog.Logger // may be nil

	// HostUID/HostGID is the unprivileged host identity the sandbox user is
	// mapped to when codellm runs as root (default 65534, "nobody"). When
	// codellm is unprivileged its own euid/egid is used instead, because an
	// unprivileged process may only map itself.
	HostUID, HostGID int

	// Egress, when set, is the only way out of a block's (otherwise empty)
	// network namespace: each run opens a session with it and every block
	// gets a listener on 127.0.0.1:3128 inside its namespace, the proxy
	// variables in its environment and a Landlock rule allowing TCP
	// connect to that port only. Package egress implements it.
	Egress func(runID string, narrow []string) (EgressRun, error)
	// EgressReport describes Egress for Report (doctor, /readyz); nil leaves it out.
	EgressReport *EgressReport

	// Shared is a host directory every block sees read-only at SharedMount (its private root) or at its own
	// path (no private root, or the sandbox off): the module path of helpers shipped with codellm
	// (fleetkit). Empty: nothing is shared. Its parents must be searchable by the sandbox's host uid.
	Shared string
	// ProgramAsPID1 execs the program as its PID namespace's init instead of
	// keeping the helper as init (see "PID 1 semantics" in the package
	// documentation). Only for benchmarks and differential tests: the
	// program then ignores its own kill -9 and every SIGTERM.
	ProgramAsPID1 bool
	// GoHelper gives every block the Go helper (a re-exec of this binary).
	// By default a block the raw helper serves gets that instead: a fork of
	// the spawner that runs the same confinement as precompiled system calls
	// without starting a Go runtime (package rawhelper says which blocks).
	// For A/B benchmarks, and to rule the raw helper out.
	GoHelper bool
}

// EgressRun is the egress of one run: Serve accepts on one block's
// listener until it is closed; Close ends every connection of the run.
type EgressRun interface {
	Serve(l net.Listener)
	Close() error
}

// SharedMount is where Config.Shared appears inside a block's private root.
const SharedMount = "/codellm"

// Spec describes one block to start.
type Spec struct {
	Path    string   // absolute host path of the program; the same path is valid inside the sandbox
	Args    []string // full argv, Args[0] included
	Env     []string // the complete environment (nothing is inherited)
	Dir     string   // host workdir (exists); working directory, visible at the same path inside
	Persist bool     // false: Dir copied into a size-limited private tmpfs; true: Dir bind-mounted read-write
	// WorkdirSize is the size of that private tmpfs (Persist false, with a private root); 0: the run's
	// TmpSize, which also sizes /tmp and /dev/shm.
	WorkdirSize int64
	// ReadOnly binds a persistent Dir read-only (a command that may not write the user's files).
	ReadOnly bool
	// AsDirOwner runs the block as the owner of Dir (a user's tree, e.g. a registered workspace) when the
	// sandbox is root, instead of giving the tree to the sandbox's unprivileged uid; a root-owned Dir is
	// refused.
	AsDirOwner bool
	// MountAt, when set, is where Dir appears inside the sandbox (and the working directory there), so that
	// no host path shows in $PWD, argv or tracebacks; see [Run.Workdir]. It applies with a private root
	// only (native mode); elsewhere the program sees Dir itself.
	MountAt string
	Stdin   *os.File // nil = /dev/null (immediate EOF)
	Stdout  *os.File // required
	Stderr  *os.File // required
	Limits  *Limits  // unused by Start (limits are per Run); reserved
	// Deterministic, when set, makes the block reproducible (see [Determinism]); Start refuses with an
	// *UnavailableError when the platform cannot honour every part of it.
	Deterministic *Determinism
	// Collect, when set, is called once the program has ended and everything else in its namespace has
	// been killed and reaped, before the namespace goes: root is the block's working directory as the
	// server can read it (/proc/<init>/root + the workdir inside), so a Persist false block's private
	// tmpfs can be copied out. root is not a trustworthy path: open it with os.OpenRoot and never follow
	// what is inside out of it. A block stopped by Kill still gets its Collect (Kill then ends the
	// program but holds the namespace); one whose init was killed from outside does not (see
	// Result.Collected). Only runs with a private root can collect ([Run.CanCollect]); elsewhere Start
	// refuses the Spec.
	Collect func(root string) error
}

func (s *Spec) validate() error {
	if err := checkMountAt(s.MountAt); err != nil {
		return err
	}
	switch {
	case s.Path == "" || s.Path[0] != '/':
		return fmt.Errorf("%w: program path %q is not absolute", ErrInvalidSpec, s.Path)
	case len(s.Args) == 0:
		return fmt.Errorf("%w: empty argv (Args[0] is required)", ErrInvalidSpec)
	case s.Dir == "" || s.Dir[0] != '/':
		return fmt.Errorf("%w: workdir %q is not absolute", ErrInvalidSpec, s.Dir)
	case s.Stdout == nil || s.Stderr == nil:
		return fmt.Errorf("%w: Stdout and Stderr are required", ErrInvalidSpec)
	case s.WorkdirSize < 0:
		return fmt.Errorf("%w: negative WorkdirSize", ErrInvalidSpec)
	}
	for _, e := range s.Env {
		if indexByte(e, '=') <= 0 {
			return fmt.Errorf("%w: environment entry %q is not NAME=value", ErrInvalidSpec, e)
		}
	}
	for _, x := range append(append([]string{s.Path, s.Dir}, s.Args...), s.Env...) {
		if indexByte(x, 0) >= 0 {
			return fmt.Errorf("%w: NUL byte in path, argument or environment", ErrInvalidSpec)
		}
	}
	st, err := os.Stat(s.Dir)
	if err != nil {
		return fmt.Errorf("%w: workdir: %v", ErrInvalidSpec, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: workdir %s is not a directory", ErrInvalidSpec, s.Dir)
	}
	return nil
}

// checkMountAt accepts a clean absolute path outside the directories the private root is made of.
func checkMountAt(p string) error {
	if p == "" {
		return nil
	}
	if p[0] != '/' || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("%w: MountAt %q is not a clean absolute path below /", ErrInvalidSpec, p)
	}
	first, _, _ := strings.Cut(p[1:], "/")
	switch first {
	case "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp", "sys", "run":
		return fmt.Errorf("%w: MountAt %q is inside /%s, which the sandbox's root provides", ErrInvalidSpec, p, first)
	}
	return nil
}

// Workdir is the path at which a program started with spec.Dir == host and spec.MountAt == mountAt finds
// its working directory: mountAt when the run's blocks get a private root, host otherwise. Callers build
// argv and the environment with it.
func (r *Run) Workdir(host, mountAt string) string {
	if mountAt != "" && r.privateRoot() {
		return mountAt
	}
	return host
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return -1
}

// LimitKind names the sandbox limit that ended a process.
type LimitKind string

const (
	LimitNone     LimitKind = ""
	LimitMemory   LimitKind = "memory"
	LimitPids     LimitKind = "pids"
	LimitCPU      LimitKind = "cpu"
	LimitFileSize LimitKind = "file_size"
)

// Result is how a block ended.
type Result struct {
	ExitCode  int            // exit status; -1 when a signal ended the process
	Signal    syscall.Signal // 0 when it exited
	Wall      time.Duration
	CPU       time.Duration // user+sys of the block (and its reaped descendants)
	MaxRSS    int64         // peak memory in bytes (cgroup peak where available, else rusage)
	Limit     LimitKind     // which sandbox limit ended it, if known ("" otherwise)
	LimitDesc string        // human text for messages, e.g. "memory limit 512 MiB"
	Err       error         // non-nil if the sandbox failed after Start (rare)
	// Collected says Spec.Collect ran; CollectErr is what it returned.
	Collected  bool
	CollectErr error
}

// Sentinel errors. *UnavailableError matches ErrUnavailable with errors.Is.
var (
	ErrUnavailable   = errors.New("sandbox unavailable")
	ErrInvalidConfig = errors.New("invalid sandbox config")
	ErrInvalidSpec   = errors.New("invalid sandbox spec")
	ErrClosed        = errors.New("sandbox run closed")
)

// UnavailableError says a protection could not be applied. It is mapped by
// the server to 422 sandbox_unavailable.
type UnavailableError struct{ Mechanism, Reason, Fix string }

func (e *UnavailableError) Error() string {
	s := e.Mechanism + ": " + e.Reason
	if e.Fix != "" {
		s += " (fix: " + e.Fix + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Sandbox is a configured, host-probed sandbox shared by all runs.
type Sandbox struct {
	cfg    Config
	log    *slog.Logger
	report Report
	plat   platform // OS-specific state (probe results, helper path)

	warnOnce sync.Map // mechanism name -> struct{}; "log once per mechanism"
}

// New validates cfg and probes the host once.
func New(cfg Config) (*Sandbox, error) {
	m, err := ParseMode(string(cfg.Mode))
	if err != nil {
		return nil, err
	}
	cfg.Mode = m
	if err := cfg.Limits.validate(); err != nil {
		return nil, err
	}
	cfg.Limits = cfg.Limits.withDefaults(DefaultLimits())
	if cfg.HostUID == 0 {
		cfg.HostUID = 65534
	}
	if cfg.HostGID == 0 {
		cfg.HostGID = 65534
	}
	if cfg.Egress != nil && (cfg.Network || cfg.Mode == ModeOff) {
		return nil, fmt.Errorf("%w: an egress allow-list needs the sandbox's empty network namespace (not --network, not mode off)", ErrInvalidConfig)
	}
	if cfg.HostUID < 0 || cfg.HostGID < 0 {
		return nil, fmt.Errorf("%w: negative host uid/gid", ErrInvalidConfig)
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	s := &Sandbox{cfg: cfg, log: lg}
	if err := s.init(); err != nil {
		return nil, err
	}
	switch cfg.Mode {
	case ModeOff:
		lg.Warn("sandbox is OFF: blocks run unconfined as codellm's own user", "mode", cfg.Mode)
	case ModeBestEffort:
		for _, m := range s.report.Missing {
			s.warnMissing(m)
		}
	}
	if cfg.Network && cfg.Mode != ModeOff {
		lg.Warn("sandbox network is ENABLED: blocks can reach the network", "mode", cfg.Mode)
	}
	return s, nil
}

func (s *Sandbox) warnMissing(mech string) {
	if _, loaded := s.warnOnce.LoadOrStore(mech, struct{}{}); !loaded {
		s.log.Warn("sandbox mechanism unavailable; running without it (besteffort)", "mechanism", mech)
	}
}

// Mode returns the configured mode.
func (s *Sandbox) Mode() Mode { return s.cfg.Mode }

// Config returns the effective configuration (defaults filled in).
func (s *Sandbox) Config() Config { return s.cfg }

// Report returns the mechanism table computed when the Sandbox was created.
func (s *Sandbox) Report() Report {
	r := s.report.clone()
	if e := s.cfg.EgressReport; e != nil {
		c := *e
		c.Allow = append([]string{}, e.Allow...)
		r.Egress = &c
	}
	return r
}

// NewRun creates the per-pipeline state (cgroup, limits). lim nil means
// Config.Limits; zero fields in lim also take the Config value.
func (s *Sandbox) NewRun(lim *Limits) (*Run, error) {
	l := s.cfg.Limits
	if lim != nil {
		if err := lim.validate(); err != nil {
			return nil, err
		}
		l = lim.withDefaults(s.cfg.Limits)
	}
	if l.NetworkAllow != nil && s.cfg.Egress == nil {
		return nil, fmt.Errorf("%w: a network allow-list was asked for but this server has no egress proxy", ErrInvalidConfig)
	}
	r := &Run{sb: s, lim: l, procs: map[*Process]struct{}{}}
	if err := r.init(); err != nil {
		return nil, err
	}
	if s.cfg.Egress != nil {
		var narrow []string
		if l.NetworkAllow != nil {
			narrow = append([]string{}, *l.NetworkAllow...)
		}
		e, err := s.cfg.Egress(r.ID(), narrow)
		if err != nil {
			_ = r.release()
			return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		r.egress = e
	}
	return r, nil
}

// Run groups the blocks of one pipeline: they share the run's limits and are
// killed together.
type Run struct {
	sb  *Sandbox
	lim Limits

	mu       sync.Mutex
	procs    map[*Process]struct{}
	closed   bool
	seq      int
	oneBlock bool // OneBlock

	id     string
	egress EgressRun // nil without Config.Egress

	plat runPlatform
}

// OneBlock declares, before the run's first Start, that the run starts exactly one block; a second Start
// is refused. The block then runs in the run's own cgroup rather than in a child group of it: the same
// limits and the same numbers (the run holds nothing else), and one level of cgroup directories fewer to
// make and remove per run (on cgroup v1 three mkdirs and three rmdirs, the costliest cgroup operations).
// The servers' single-block runs (an /api/v2/execute run or compile stage, a one-block pipeline, a
// workspace command) declare it.
func (r *Run) OneBlock() {
	r.mu.Lock()
	r.oneBlock = true
	r.mu.Unlock()
}

// CanCollect reports whether the run's blocks may have a Spec.Collect: they get a private root and the
// sandbox's own init, which can hold the namespace once the program is over.
func (r *Run) CanCollect() bool { return r.privateRoot() && !r.sb.cfg.ProgramAsPID1 }

// ID names the run in logs (egress decisions carry it).
func (r *Run) ID() string { return r.id }

// Limits returns the effective limits of the run.
func (r *Run) Limits() Limits { return r.lim }

// Start starts one block. It returns once the program has been exec'd
// inside the sandbox, or with a setup error (*UnavailableError for a
// mechanism that could not be applied, ErrInvalidSpec for bad input).
func (r *Run) Start(spec Spec) (*Process, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if spec.Collect != nil && !r.CanCollect() {
		return nil, fmt.Errorf("%w: Collect needs a private root and the sandbox's init (native mode, or besteffort with user, mount and PID namespaces)", ErrInvalidSpec)
	}
	if spec.Deterministic != nil && r.sb.Reaches(r.lim.NetworkAllow) {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, ErrDeterministicNetwork)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	if r.oneBlock && r.seq > 0 {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: the run was declared to start one block (OneBlock) and has started it", ErrInvalidSpec)
	}
	r.seq++
	seq, one := r.seq, r.oneBlock
	r.mu.Unlock()

	p, err := r.start(&spec, seq, one)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.closed { // Close raced with Start: do not let the block escape.
		r.mu.Unlock()
		p.Kill()
		p.Wait()
		return nil, ErrClosed
	}
	r.procs[p] = struct{}{}
	r.mu.Unlock()
	return p, nil
}

// Kill sends SIGKILL to every process of the run (all blocks).
func (r *Run) Kill() {
	r.mu.Lock()
	ps := make([]*Process, 0, len(r.procs))
	for p := range r.procs {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	hold, settled := true, true
	for _, p := range ps {
		p.Kill()
		hold = hold && p.holds()
		settled = settled && p.leftNothingYet()
	}
	if len(ps) == 0 || !hold && !settled {
		// A holding block's Kill keeps its namespace for Collect; each is its PID namespace's init, so
		// nothing of it can be outside the namespace the init ends. Blocks that all left nothing behind
		// need no group kill either: only their exiting inits can still be in the group, and on v1 the
		// kill of a populated group freezes, signals and thaws it in every hierarchy.
		r.killAll()
	}
}

// Close kills every process, waits for them and releases the run's
// resources (cgroups). It is idempotent.
func (r *Run) Close() error {
	Trace("s.close")
	defer Trace("s.close.done")
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	ps := make([]*Process, 0, len(r.procs))
	for p := range r.procs {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	// The blocks first; whatever else is left in the run's cgroup (nothing
	// can be in native mode, where every block is its PID namespace's init)
	// is killed and waited for by release, which checks the group anyway:
	// a separate group kill here would read every hierarchy once more.
	for _, p := range ps {
		p.Kill()
	}
	for _, p := range ps {
		<-p.done // reaped by Wait or by the reaper goroutine
	}
	if r.egress != nil {
		_ = r.egress.Close()
	}
	return r.release()
}

// Process is one started block.
type Process struct {
	run   *Run
	pid   int
	start time.Time

	// ready is closed when res is final (nil: at done). An init's block has
	// its result before its init is reaped (Process.reap).
	ready       chan struct{}
	done        chan struct{} // closed when the process has been reaped
	res         Result
	leftNothing bool // see LeftNothing; set before ready is closed

	plat procPlatform
}

// Pid returns the host PID of the block (its PID-namespace init in native mode).
func (p *Process) Pid() int { return p.pid }

// Wait returns when the block and every descendant are gone (in native
// mode the init itself may still be exiting: Run.Close waits for it). Call
// it once; further calls return the same Result.
func (p *Process) Wait() Result {
	if p.ready != nil {
		<-p.ready
	} else {
		<-p.done
	}
	return p.res
}

// LeftNothing reports, once Wait has returned, whether the block was known
// to have left nothing running behind: its init ended every other process
// of its namespace before it reported the program's end (native mode), so
// nothing can hold its pipes or change its files any more, and only the
// init's own exit, which runs nothing of the block's, may still be under
// way. False when that is not known (other modes: Run.Close kills what is
// left).
func (p *Process) LeftNothing() bool { return p.leftNothing }

// leftNothingYet is LeftNothing for a caller that has not waited: false
// while the block's result is not in.
func (p *Process) leftNothingYet() bool {
	if p.ready == nil {
		return false
	}
	select {
	case <-p.ready:
		return p.leftNothing
	default:
		return false
	}
}

// Kill sends SIGKILL to the block and all its descendants.
func (p *Process) Kill() { p.kill() }

// TermGrace is how long codellm waits after a Terminate it sends on a
// timeout before it kills the block: enough for a program to flush and
// clean up, short enough not to hold a timed-out reply.
const TermGrace = 500 * time.Millisecond

// Terminate asks the block to stop with SIGTERM, as a shell's kill or a
// supervisor would: in native mode it goes to the program under the
// block's init (which may handle it); without a PID namespace to the
// block's process group. Callers give it a grace, then Kill.
func (p *Process) Terminate() { p.signal(syscall.SIGTERM) }

// Signal sends sig where Terminate sends SIGTERM: to the program under the block's init (the runner's
// interactive connection forwards a client's signals with it).
func (p *Process) Signal(sig syscall.Signal) { p.signal(sig) }

// describeLimit renders the human text for a limit kind.
func describeLimit(k LimitKind, l Limits) string {
	switch k {
	case LimitMemory:
		return "memory limit " + FormatBytes(l.Memory)
	case LimitPids:
		return fmt.Sprintf("pids limit %d", l.Pids)
	case LimitCPU:
		return "CPU time limit " + l.CPUTime.String()
	case LimitFileSize:
		return "file size limit " + FormatBytes(l.FileSize)
	}
	return ""
}

// FormatBytes renders n in the largest binary unit that divides it exactly
// (512 MiB, 1536 KiB), falling back to bytes.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		s string
		v int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return fmt.Sprintf("%d %s", n/u.v, u.s)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
