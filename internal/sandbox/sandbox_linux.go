//go:build linux

package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/landlock"
	"github.com/codellm/codellm/internal/sandbox/seccomp"
	"golang.org/x/sys/unix"
)

// statusTimeout bounds how long Start waits for the helper to exec; it only
// detects a wedged helper (setup takes milliseconds).
const statusTimeout = 30 * time.Second

type platform struct {
	helperPath  string
	avail       mechSet // what the host supports
	use         mechSet // what each block gets (mode and availability)
	want        mechSet // what the mode asks for
	landlockABI int
	euid        int
	hostUID     int // host identity of sandboxed code
	hostGID     int
	detail      map[mechSet]string
	version     map[mechSet]string

	cg *cgroup.Host // nil when cgroups are unusable
	// removals counts closed runs' groups still being removed in the
	// background (removeLater); tests wait for it.
	removals *sync.WaitGroup
	pool     *groupPool // run groups made ahead of need; nil without cgroups
	spawner  *helperSpawner
	clock    *groupClock // cgroups made and removed (SerialStats)
	// fallback: the first block that got the Go helper although it was a
	// raw candidate has been logged (noteFallback).
	fallback *sync.Once

	// features are the probed kernel facilities (features_linux.go);
	// rawOff, when set, is why no block gets the raw helper (a facility it
	// needs is missing), and noClone3 keeps helpers from being cloned into
	// their cgroup (codellm moves them in instead).
	features []FeatureStatus
	rawOff   string
	noClone3 bool

	// disabled switches mechanisms off, for differential tests and
	// benchmarks only (never set in production code).
	disabled mechSet
}

type runPlatform struct {
	group *cgroup.Group // the run's cgroup; nil without cgroups
	use   mechSet       // mechanisms for the run's blocks, fixed at NewRun
}

type procPlatform struct {
	osp     *os.Process
	group   *cgroup.Group // the block's child group of the run's cgroup
	runGrp  *cgroup.Group
	mu      sync.Mutex
	reaped  bool
	pgKill  bool     // kill the process group too (no PID namespace)
	killed  bool     // codellm sent SIGKILL (so a SIGKILL is not a limit's)
	offMode bool     // the group only serves Kill: no stats, no attribution
	status  *os.File // the init's status pipe (Spec.Init): the program's wait status arrives on it
	progPID int      // with an init: the program's PID inside the block's PID namespace
	limits  Limits
	started time.Time

	egressLn net.Listener // the block's egress listener, closed when it is reaped

	// With Spec.Collect the init holds the namespace once the program is over (hook.Spec.Hold).
	collect   func(root string) error
	collectAt string // /proc/<init>/root + the workdir inside
	recorded  bool   // the init's wait record arrived: the program is over, the init holds
}

// holdKillGrace is how long Kill lets a holding init end its namespace (hook.HoldSignal) and report before
// it is killed outright, files and all; ending and reaping a namespace takes milliseconds.
const holdKillGrace = 2 * time.Second

// setHold prepares the collect of a block whose init holds its namespace
// (hook.Spec.Hold, for spec.Collect: Start has checked the run can).
func (pp *procPlatform) setHold(spec *Spec, hs *hook.Spec, pid int) {
	if !hs.Hold {
		return
	}
	pp.collect, pp.collectAt = spec.Collect, "/proc/"+strconv.Itoa(pid)+"/root"+hs.Dir
}

func (p *Process) holds() bool { return p.plat.collect != nil }

func (s *Sandbox) init() error {
	p := &s.plat
	p.euid = os.Geteuid()
	p.removals = &sync.WaitGroup{}
	p.fallback = &sync.Once{}
	p.pool = &groupPool{}
	p.spawner = &helperSpawner{}
	p.clock = &groupClock{}
	p.detail = map[mechSet]string{}
	p.version = map[mechSet]string{}
	var err error
	p.helperPath, err = processHelper()
	if p.euid == 0 {
		p.hostUID, p.hostGID = s.cfg.HostUID, s.cfg.HostGID
	} else {
		p.hostUID, p.hostGID = p.euid, os.Getegid()
	}
	p.avail = probeStatic(p, err)
	p.features = p.probeFeatures()
	s.sweepStaleGroups()
	switch s.cfg.Mode {
	case ModeOff:
		p.want = 0
	default:
		p.want = wantedMechs
	}
	if s.cfg.Mode != ModeOff && p.avail.has(mHelper) {
		s.trialSpawn()
	}
	p.use = p.want & p.avail
	// After the trial spawn, which decides whether blocks get overlays.
	p.spawner.setOverlay(s.spawnerOverlay(), s.log)
	s.report = s.buildReport()
	return nil
}

// wantedMechs is what native mode requires.
var wantedMechs = mAll

// probeStatic checks what the kernel offers without starting anything
// (trialSpawn then finds what a container runtime or LSM forbids). A
// mechanism that needs another one is only available with it: the private
// root needs mount and PID namespaces, its overlays need the private root.
func probeStatic(p *platform, exeErr error) mechSet {
	var m mechSet
	if exeErr == nil {
		m |= mHelper
	} else {
		p.detail[mHelper] = "cannot locate own executable: " + exeErr.Error()
	}
	m |= probeNamespaces(p)
	if m.has(mMountNS) && m.has(mPIDNS) {
		m |= mRootFS
	} else {
		p.detail[mRootFS] = "needs mount and PID namespaces"
	}
	if m.has(mRootFS) {
		hostMounts.below(nil) // open the table now, before any caller counts descriptors
		m |= mOverlay
		p.detail[mOverlay] = "system directories, /etc entries and the shared dir are read-only lower-only overlays, not binds: host Unix sockets under them refuse connect (checked at start against a live socket)"
	} else {
		p.detail[mOverlay] = "needs the private root"
	}
	m |= probeLandlock(p) | probeSeccomp(p) | probeCgroup(p)
	m |= mRlimit | mNoNewPrivs | mCaps
	if p.euid == 0 {
		p.detail[mUserNS] = fmt.Sprintf("uid %d inside maps to host uid %d", sandboxUID, p.hostUID)
	}
	return m
}

// probeNamespaces: the user namespace (and the sysctls that disable it),
// then the others, which without a user namespace only root can create.
func probeNamespaces(p *platform) mechSet {
	var m mechSet
	nsAvail := func(file string) bool {
		_, err := os.Stat("/proc/self/ns/" + file)
		return err == nil
	}
	userns := nsAvail("user")
	if sysctlIs("/proc/sys/user/max_user_namespaces", "0") {
		userns = false
		p.detail[mUserNS] = "user.max_user_namespaces is 0"
	}
	if p.euid != 0 && sysctlIs("/proc/sys/kernel/unprivileged_userns_clone", "0") {
		userns = false
		p.detail[mUserNS] = "kernel.unprivileged_userns_clone is 0"
	}
	if userns {
		m |= mUserNS
	}
	privileged := userns || p.euid == 0
	for _, ns := range []struct {
		bit  mechSet
		file string
	}{{mPIDNS, "pid"}, {mMountNS, "mnt"}, {mNetNS, "net"}, {mIPCNS, "ipc"}, {mUTSNS, "uts"}, {mCgroupNS, "cgroup"}} {
		switch {
		case !nsAvail(ns.file):
			p.detail[ns.bit] = "kernel has no " + ns.file + " namespaces"
		case !privileged:
			p.detail[ns.bit] = "needs a user namespace (not root)"
		default:
			m |= ns.bit
		}
	}
	return m
}

// sysctlIs reports whether the file exists and holds v.
func sysctlIs(file, v string) bool {
	b, err := os.ReadFile(file)
	return err == nil && strings.TrimSpace(string(b)) == v
}

func probeLandlock(p *platform) mechSet {
	abi := landlock.ABI()
	if abi <= 0 {
		p.detail[mLandlock] = "Landlock not enabled in this kernel"
		return 0
	}
	p.landlockABI = min(abi, landlock.MaxABI)
	p.version[mLandlock] = "ABI " + strconv.Itoa(abi)
	switch {
	case abi < 4:
		p.detail[mLandlock] = "no TCP rules before ABI 4 (network namespace still applies)"
	case abi < 6:
		p.detail[mLandlock] = "no signal/abstract-socket scoping before ABI 6"
	case abi > landlock.MaxABI:
		p.detail[mLandlock] = fmt.Sprintf("used at ABI %d", landlock.MaxABI)
	}
	return mLandlock
}

func probeSeccomp(p *platform) mechSet {
	if !seccomp.Supported() {
		p.detail[mSeccomp] = "seccomp filters not supported"
		return 0
	}
	p.version[mSeccomp] = fmt.Sprintf("deny list of %d syscalls", len(seccomp.DeniedOn(runtime.GOARCH))+2)
	p.detail[mSeccomp] = "socket families: unix, inet, inet6, netlink (route) only"
	return mSeccomp
}

func probeCgroup(p *platform) mechSet {
	h, err := cgroup.Detect()
	if err != nil {
		p.detail[mCgroup] = err.Error()
		return 0
	}
	p.cg = h
	in := h.Info()
	p.version[mCgroup] = "v" + strconv.Itoa(in.Version)
	p.detail[mCgroup] = strings.Join(in.Controllers, ",") + " under " + in.Path
	if len(in.Notes) > 0 {
		p.detail[mCgroup] += "; " + strings.Join(in.Notes, "; ")
	}
	return mCgroup
}

// trialSpawn runs the helper once with everything available and ProbeOnly,
// because static checks cannot see container runtimes, LSM policies or
// sysctls that forbid what the kernel nominally has. A mechanism whose
// setup fails is marked unavailable and the trial repeats without it.
func (s *Sandbox) trialSpawn() {
	p := &s.plat
	dir, err := os.MkdirTemp("", "codellm-probe-")
	if err != nil {
		p.detail[mHelper] = "probe workdir: " + err.Error()
		p.avail &^= mHelper
		return
	}
	defer os.RemoveAll(dir)
	// The overlay mechanism's check (hook.Spec.ProbeSocket): a live socket in the workdir.
	if ln, err := net.Listen("unix", filepath.Join(dir, hook.ProbeSocketName)); err == nil {
		defer ln.Close()
		_ = os.Chmod(filepath.Join(dir, hook.ProbeSocketName), 0o777)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer null.Close()
	for range 16 {
		use := p.want & p.avail
		r := &Run{sb: s, lim: s.cfg.Limits, procs: map[*Process]struct{}{}}
		var child *cgroup.Group
		if use.has(mCgroup) {
			g, err := p.cg.NewGroup(fmt.Sprintf("codellm-probe-%d-%s-%d", os.Getpid(), instanceID(), runSeq.Add(1)),
				cgroup.Limits{Memory: r.lim.Memory, Pids: r.lim.Pids})
			if err == nil {
				r.plat.group = g
				child, err = g.NewChild("block-1")
			}
			if err != nil {
				if r.plat.group != nil {
					_ = r.plat.group.Remove()
				}
				p.avail &^= mCgroup
				p.detail[mCgroup] = err.Error()
				continue
			}
		}
		sp := &Spec{Path: "/bin/true", Args: []string{"true"}, Dir: dir, Stdout: null, Stderr: null}
		proc, err := r.spawnIn(sp, use, true, child)
		var res Result
		if err == nil {
			res = proc.Wait()
		}
		if r.plat.group != nil {
			_ = r.plat.group.Remove()
		}
		if err == nil {
			if res.ExitCode == 0 {
				return
			}
			p.detail[mHelper] = fmt.Sprintf("probe helper exited %d signal %v", res.ExitCode, res.Signal)
			p.avail &^= mHelper
			return
		}
		var ue *UnavailableError
		if !errors.As(err, &ue) {
			p.detail[mHelper] = err.Error()
			p.avail &^= mHelper
			return
		}
		if !p.lose(ue) {
			return
		}
	}
}

// lose marks the mechanism a trial spawn's failure names unavailable, with
// its reason and fix as the report's detail, and what needs it with it; false
// when the failure names none the host still had (the helper is lost then).
func (p *platform) lose(ue *UnavailableError) bool {
	bit, ok := mechByName(ue.Mechanism)
	if !ok || !p.avail.has(bit) {
		p.detail[mHelper] = ue.Error()
		p.avail &^= mHelper
		return false
	}
	p.avail &^= bit
	p.detail[bit] = ue.Reason
	if ue.Fix != "" {
		p.detail[bit] += "; fix: " + ue.Fix
	}
	if bit == mUserNS && p.euid != 0 {
		p.avail &^= mPIDNS | mMountNS | mNetNS | mIPCNS | mUTSNS | mCgroupNS | mRootFS | mOverlay
	}
	if bit == mMountNS || bit == mPIDNS || bit == mRootFS {
		p.avail &^= mRootFS | mOverlay
	}
	return true
}

// withoutUserNS is besteffort's loud sentence for blocks that run without
// a user namespace although the mode wants one ("" otherwise): what they
// lose, why, and how to get it back.
func (p *platform) withoutUserNS() string {
	if !p.want.has(mUserNS) || p.avail.has(mUserNS) {
		return ""
	}
	what := "in no namespace at all: they share the host's processes, network, mounts and filesystem view as uid " +
		strconv.Itoa(p.euid) + ", bounded only by Landlock, seccomp, rlimits and the cgroup"
	if p.euid == 0 {
		what = "as host uid " + strconv.Itoa(p.hostUID) + " with the namespaces root can still make, without a uid map of their own"
	}
	return WarnWithoutUserNS + " (" + p.detail[mUserNS] + "): " + what +
		"; fix the cause, or run --sandbox native to refuse instead"
}

func (s *Sandbox) buildReport() Report {
	p := &s.plat
	l := s.cfg.Limits
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	rep := Report{
		Kernel:  unix.ByteSliceToString(uts.Release[:]),
		Mode:    s.cfg.Mode,
		Network: s.cfg.Network,
		Limits: ReportLimits{
			MemoryBytes: l.Memory, Pids: l.Pids, CPUTime: l.CPUTime.String(), TmpSizeBytes: l.TmpSize,
			FileSizeBytes: l.FileSize, OpenFiles: l.OpenFiles, HostUID: p.hostUID, SandboxUID: sandboxUID,
			SandboxUser: sandboxUser, SandboxHost: sandboxHost,
		},
		Missing: []string{},
	}
	use := p.want & p.avail
	rep.Features = append([]FeatureStatus(nil), p.features...)
	for _, e := range mechNames {
		ms := MechanismStatus{Name: e.name, Available: p.avail.has(e.bit), Version: p.version[e.bit],
			Used: use.has(e.bit), Detail: p.detail[e.bit]}
		if e.bit == mNetNS && s.cfg.Network {
			ms.Used = false
			ms.Detail = "network enabled by the operator: blocks share the host network"
		}
		rep.Mechanisms = append(rep.Mechanisms, ms)
		if p.want.has(e.bit) && !p.avail.has(e.bit) {
			rep.Missing = append(rep.Missing, e.name)
		}
	}
	if s.cfg.Mode == ModeOff {
		rep.Limits.RunsAsHostRoot = p.euid == 0
	}
	switch s.cfg.Mode {
	case ModeOff:
		rep.Ready = true
		rep.Warnings = append(rep.Warnings, "sandbox mode is off: blocks run unconfined as codellm's own user")
	case ModeBestEffort:
		rep.Ready = p.avail.has(mHelper)
		if len(rep.Missing) > 0 {
			rep.Warnings = append(rep.Warnings, "besteffort: running without "+strings.Join(rep.Missing, ", "))
		}
		if w := p.withoutUserNS(); w != "" {
			rep.Warnings = append(rep.Warnings, w)
		}
	default:
		rep.Ready = len(rep.Missing) == 0
	}
	if s.cfg.Network && s.cfg.Mode != ModeOff {
		rep.Warnings = append(rep.Warnings, "network is enabled for sandboxed blocks")
	}
	if use.has(mSeccomp) {
		rep.Protections = append(rep.Protections, "socket families: AF_UNIX, AF_INET, AF_INET6, AF_NETLINK (NETLINK_ROUTE) only; others EAFNOSUPPORT (seccomp)")
	}
	if use.has(mRootFS) {
		rep.Protections = append(rep.Protections,
			fmt.Sprintf("tmpfs inodes: %d per private tmpfs of %d bytes (workdir, /tmp, /dev/shm)", hook.TmpfsInodes(l.TmpSize), l.TmpSize),
			"masked /proc files: "+strings.Join(hook.ProcMasked, ", ")+" (read empty)")
		if use.has(mOverlay) {
			rep.Protections = append(rep.Protections, "host Unix sockets: system directories, /etc entries and the shared dir are read-only overlays; a host socket under them refuses connect (ECONNREFUSED)")
		}
	}
	rep.Determinism = determinismStatus(use)
	return rep
}

// Probe builds a Sandbox for cfg and returns its report; for `codellm
// doctor`. An invalid config yields a not-ready report naming the error.
func Probe(cfg Config) Report {
	s, err := New(cfg)
	if err != nil {
		return Report{Mode: cfg.Mode, Missing: []string{}, Warnings: []string{err.Error()}}
	}
	return s.Report()
}

var runSeq atomic.Uint64

// instanceID distinguishes this process's cgroup names from those a
// crashed predecessor with the same pid (PID 1 in a container) may have
// left behind: the cgroup package never reuses an existing group, so a
// name clash would refuse every run.
var instanceID = sync.OnceValue(func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
})

// init creates the run's cgroup. Blocks get child groups (so each block's
// peak memory and OOM kills are its own) while the limits sit on the run
// group and so bound all blocks together.
func (r *Run) init() error {
	s := r.sb
	p := &s.plat
	r.id = fmt.Sprintf("codellm-%d-%s-%d", os.Getpid(), instanceID(), runSeq.Add(1))
	if s.cfg.Mode == ModeOff {
		// Off confines nothing, but where cgroups work a limit-less run
		// group still lets Kill and Wait reach daemonised descendants that
		// left the process group (contract §5.2 item 5).
		if p.cg != nil {
			if g, err := p.newGroup(r.id, cgroup.Limits{}); err == nil {
				r.plat.group = g
			}
		}
		return nil
	}
	r.plat.use = p.runMechs()
	if !r.plat.use.has(mCgroup) {
		return nil
	}
	lim := cgroup.Limits{Memory: r.lim.Memory, Pids: r.lim.Pids}
	if pg, ok := s.takeGroup(lim); ok {
		r.id, r.plat.group = pg.name, pg.run
		return nil
	}
	g, err := p.newGroup(r.id, lim)
	if err != nil {
		if s.cfg.Mode == ModeNative {
			return &UnavailableError{Mechanism: MechCgroup, Reason: "create run cgroup: " + err.Error(), Fix: mechFix(mCgroup)}
		}
		s.warnMissing(MechCgroup)
		r.plat.use &^= mCgroup
		return nil
	}
	r.plat.group = g
	return nil
}

// runMechs are the mechanisms a new run's blocks get: what the mode asks for, the host has and no
// differential test switched off.
func (p *platform) runMechs() mechSet { return (p.want & p.avail) &^ p.disabled }

// privateRoot reports whether the run's blocks get a private root (and so MountAt).
func (r *Run) privateRoot() bool {
	use := r.plat.use
	return r.sb.cfg.Mode != ModeOff && use.has(mHelper) && use.has(mRootFS) && use.has(mMountNS) && use.has(mPIDNS)
}

func (r *Run) killAll() {
	if g := r.plat.group; g != nil {
		_ = g.Kill()
	}
}

// release removes the run's cgroup once Close has killed and reaped every
// block. When the group is confirmed empty the removal (rmdir of the run
// and block groups in every hierarchy, the kernel's most expensive cgroup
// operation, ≈ 1 ms on v1) happens in the background, after the caller's
// reply: nothing of the run is left to outlive it, only directories.
// Anything still inside is killed and waited for here, and a failure is
// Close's error.
func (r *Run) release() error {
	g := r.plat.group
	if g == nil {
		return nil
	}
	if pop, err := g.Populated(); err == nil && !pop {
		r.sb.removeLater(g)
		return nil
	}
	if err := r.sb.plat.removeGroup(g); err != nil {
		return fmt.Errorf("sandbox: remove run cgroup: %w", err)
	}
	return nil
}

// CloseLater is Close off the caller's path, for a run whose blocks have all
// been waited for: the reply need not wait for their inits' exits (the
// teardown of their address spaces, mounts and namespaces, nothing of the
// block's own by then: Process.reap) or for the run's cgroups. An error is
// logged. Settle and Sandbox.Close wait for it.
func (r *Run) CloseLater() {
	s := r.sb
	s.plat.removals.Add(1)
	go func() {
		defer s.plat.removals.Done()
		if err := r.Close(); err != nil {
			s.log.Warn("sandbox: closing a finished run failed", "err", err)
		}
	}()
}

// removeLater removes an empty, closed run's group off the request path.
// Remove still kills and waits should anything have entered it (nothing
// can: its blocks are reaped and Start refuses a closed run). A failure
// leaves a directory, which is logged; the next start's sweep removes it.
func (s *Sandbox) removeLater(g *cgroup.Group) {
	s.plat.removals.Add(1)
	go func() {
		defer s.plat.removals.Done()
		if err := s.plat.removeGroup(g); err != nil {
			s.log.Warn("sandbox: removing a closed run's cgroup failed", "group", g.Path(), "err", err)
		}
	}()
}

// start picks the mechanisms for this block and refuses in native mode
// when any is missing. one: the run starts this block only (Run.OneBlock).
func (r *Run) start(spec *Spec, seq int, one bool) (*Process, error) {
	s := r.sb
	p := &s.plat
	if seq > 1 && r.plat.group != nil {
		// The run's blocks share its cpu cgroup, which the scheduler weighs
		// like one task against the host's; so that a pipeline of n blocks
		// gets what n shell processes would under contention, the run
		// weighs n tasks (docs/operator.md, "CPU weight of a run").
		_ = r.plat.group.SetCPUWeight(seq)
	}
	if s.cfg.Mode == ModeOff {
		var child *cgroup.Group
		if r.plat.group != nil {
			child, _ = r.plat.group.NewChild("block-" + strconv.Itoa(seq))
		}
		return r.startOff(spec, child)
	}
	use := r.plat.use
	if s.cfg.Mode == ModeNative {
		if miss := p.want &^ p.avail; miss != 0 {
			b := miss.first()
			reason := p.detail[b]
			if reason == "" {
				reason = "not available on this host"
			}
			return nil, &UnavailableError{Mechanism: mechName(b), Reason: reason, Fix: mechFix(b)}
		}
	} else {
		for _, n := range (p.want &^ p.avail).names() {
			s.warnMissing(n)
		}
	}
	var child *cgroup.Group
	name := "block-" + strconv.Itoa(seq)
	if one && use.has(mCgroup) && r.plat.group != nil {
		child = r.plat.group // the run holds this block only: its group is the block's
	} else if use.has(mCgroup) && r.plat.group != nil {
		c, err := p.newBlockGroup(r.plat.group, name, use)
		if err != nil {
			if s.cfg.Mode == ModeNative {
				return nil, &UnavailableError{Mechanism: MechCgroup, Reason: "create block cgroup: " + err.Error(), Fix: mechFix(mCgroup)}
			}
			s.warnMissing(MechCgroup)
		}
		child = c
	}
	return r.spawnIn(spec, use, false, child)
}

// blockGroup makes a block's cgroup below its run's. A block that is its PID namespace's init only needs
// one to measure (an accounting child: on cgroup v1 no directories of its own in the cpu and freezer
// hierarchies); one without a PID namespace is killed through its group, which needs the freezer.
func blockGroup(run *cgroup.Group, name string, use mechSet) (*cgroup.Group, error) {
	if use.has(mPIDNS) {
		return run.NewAccountingChild(name)
	}
	return run.NewChild(name)
}

// blockIdentity is the host uid and gid a block runs as. Normally the
// unprivileged host uid, which must be able to read (and, persistent,
// write) the workdir the caller created as root with mode 0700, so a root
// sandbox gives that tree to it. A user's tree (Spec.AsDirOwner) is never
// chowned: the block runs as the owner of its root instead, and a
// root-owned root is refused, since code never runs as host root.
func blockIdentity(spec *Spec, p *platform) (int, int, error) {
	if spec.AsDirOwner && p.euid == 0 {
		var st unix.Stat_t
		if err := unix.Stat(spec.Dir, &st); err != nil {
			return 0, 0, fmt.Errorf("%w: workdir: %v", ErrInvalidSpec, err)
		}
		if st.Uid == 0 {
			return 0, 0, fmt.Errorf("%w: workdir %s is owned by root: commands run as its owner and never as host root", ErrInvalidSpec, spec.Dir)
		}
		return int(st.Uid), int(st.Gid), nil
	}
	if p.euid == 0 && p.hostUID != 0 {
		if err := chownTree(spec.Dir, p.hostUID, p.hostGID); err != nil {
			return 0, 0, fmt.Errorf("%w: prepare workdir: %v", ErrInvalidSpec, err)
		}
	}
	return p.hostUID, p.hostGID, nil
}

// readStarted reads the helper's answer to its spec. A helper that execs
// the program (no init) closes the pipe by exec'ing, so everything up to
// EOF is the answer (a Started byte may be followed by an exec failure);
// an init writes Started only once the program runs, with the program's
// PID in the block's namespace (returned), and keeps the pipe for the
// program's wait status, so its answer is complete at that record.
func readStarted(statR *os.File, init bool) ([]byte, int, error) {
	_ = statR.SetReadDeadline(time.Now().Add(statusTimeout))
	defer statR.SetReadDeadline(time.Time{})
	if !init {
		msg, err := io.ReadAll(io.LimitReader(statR, 64<<10))
		return msg, 0, err
	}
	var first [1]byte
	if _, err := io.ReadFull(statR, first[:]); err != nil {
		if err == io.EOF {
			err = nil // died during setup: EOF without Started
		}
		return nil, 0, err
	}
	if first[0] == hook.Started {
		var pid [4]byte
		if _, err := io.ReadFull(statR, pid[:]); err != nil {
			return nil, 0, fmt.Errorf("the init's Started record is cut short: %w", err)
		}
		return first[:], hook.ParseStartedPID(pid), nil
	}
	rest, err := io.ReadAll(io.LimitReader(statR, 64<<10))
	return append(first[:], rest...), 0, err
}

func helperFailure(msg []byte, rerr error, st *os.ProcessState) error {
	if err := rawFailure(msg); err != nil {
		return err
	}
	if _, failed, mech, reason, ok := hook.ParseStatus(msg); ok && failed {
		if mech == hook.MExec {
			return &UnavailableError{Mechanism: "exec", Reason: reason,
				Fix: "the program must exist inside the sandbox (under /usr, /bin, /sbin or /lib*) and be executable"}
		}
		return &UnavailableError{Mechanism: mechName(mechSet(mech)), Reason: reason, Fix: mechFix(mechSet(mech))}
	}
	reason := "helper exited before exec"
	if rerr != nil {
		reason = "no answer from helper: " + rerr.Error()
	}
	if st != nil {
		reason += " (" + st.String() + ")"
	}
	return &UnavailableError{Mechanism: MechHelper, Reason: reason, Fix: mechFix(mHelper)}
}

// reap waits for the block; with a PID namespace the kernel has killed and
// reaped every other process of the namespace by the time its init is a
// zombie. Without one the process group is killed while the leader is still
// a zombie (so its id cannot have been reused), then the leader is reaped.
//
// An init (hook.runInit) reports the program's wait status only once it has
// killed and reaped everything else in its namespace, so from that record
// on nothing of the block runs: the result is published then (Wait
// returns), from the program's status and the block's cgroup, and the
// init's own exit — its address space, the block's mounts and namespaces,
// about 2.7 ms at c=1 (BENCHMARKS.md) — is waited for behind it; Close
// still waits for that (done).
func (p *Process) reap() {
	pp := &p.plat
	prog := programStatus(pp.status)
	Trace("s.progstatus")
	collected, cerr := p.collectHeld(prog != nil)
	if res, ok := p.earlyResult(prog); ok {
		p.leftNothing = true
		p.publish(res)
		p.awaitInit()
		close(p.done)
		return
	}
	st, err := p.awaitInit()
	pp.mu.Lock()
	killed := pp.killed
	pp.mu.Unlock()
	res := buildResult(st, err, time.Since(pp.started), pp.limits, killed, prog)
	res.Collected, res.CollectErr = collected, cerr
	if pp.group != nil && pp.offMode {
		_ = pp.group.Kill() // daemons that left the process group
		_ = pp.group.WaitEmpty(cgroup.DefaultWait)
	} else if pp.group != nil {
		// The block is gone (its PID namespace with it); without a PID
		// namespace, stragglers that left the process group still sit in
		// the block's cgroup.
		if pp.pgKill {
			_ = pp.group.Kill()
		}
		if cs, err := pp.group.Stats(); err == nil {
			if cs.MemoryPeak > 0 {
				res.MaxRSS = cs.MemoryPeak
			}
			if cs.CPU > res.CPU {
				res.CPU = cs.CPU
			}
			p.attributeLimit(&res, cs)
		}
	}
	p.publish(res)
	close(p.done)
}

// earlyResult is the block's result at the init's wait record, when
// everything it needs is known by then: the program's status, and the CPU
// and memory peak from the block's cgroup (a kernel without memory.peak
// waits for the init's rusage instead). Not for a holding init (Collect
// reads its namespace first) or a block without an init or its own group.
func (p *Process) earlyResult(prog *syscall.WaitStatus) (Result, bool) {
	pp := &p.plat
	if prog == nil || pp.collect != nil || pp.pgKill || pp.group == nil || pp.offMode {
		return Result{}, false
	}
	cs, err := pp.group.Stats()
	if err != nil || cs.MemoryPeak <= 0 {
		return Result{}, false
	}
	pp.mu.Lock()
	killed := pp.killed
	pp.mu.Unlock()
	res := resultOf(*prog, cs.CPU, cs.MemoryPeak, time.Since(pp.started), pp.limits, killed)
	p.attributeLimit(&res, cs)
	return res, true
}

// attributeLimit names the cgroup limit a failed block ran into.
func (p *Process) attributeLimit(res *Result, cs cgroup.Stats) {
	pp := &p.plat
	failed := res.Signal != 0 || res.ExitCode != 0
	switch {
	case cs.OOMKills > 0 && failed:
		res.Limit = LimitMemory
	case failed && res.Limit == "" && pp.runGrp != nil && pidsHit(pp.runGrp):
		res.Limit = LimitPids
	}
	res.LimitDesc = describeLimit(res.Limit, pp.limits)
}

// publish makes res the block's result and lets Wait return.
func (p *Process) publish(res Result) {
	p.res = res
	Trace("s.reaped")
	if p.ready != nil {
		close(p.ready)
	}
}

// awaitInit waits for the block's helper (its init) to exit and reaps it.
func (p *Process) awaitInit() (*os.ProcessState, error) {
	pp := &p.plat
	if pp.pgKill {
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				break
			}
		}
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	awaitExit(p.pid)
	Trace("s.exited")
	st, err := pp.osp.Wait()
	if pp.egressLn != nil {
		_ = pp.egressLn.Close() // the namespace dies with its last socket
	}
	pp.mu.Lock()
	pp.reaped = true
	pp.mu.Unlock()
	return st, err
}

// collectHeld runs Collect against the held namespace once the program is
// over (recorded: the init's wait record arrived), then ends the init.
func (p *Process) collectHeld(recorded bool) (bool, error) {
	pp := &p.plat
	if pp.collect == nil {
		return false, nil
	}
	pp.mu.Lock()
	pp.recorded = recorded
	pp.mu.Unlock()
	var err error
	if recorded {
		err = pp.collect(pp.collectAt)
	}
	_ = pp.osp.Signal(syscall.SIGKILL)
	return recorded, err
}

// programStatus reads the init's report of its program's wait status (see
// hook.WaitRecord): one fixed-size record, which a holding init writes and
// then lives on, and any other init writes right before it exits. nil when
// there was no init or it was killed before the program ended (codellm's
// SIGKILL, which ends the whole namespace: then the init's own status is
// the program's too).
func programStatus(status *os.File) *syscall.WaitStatus {
	if status == nil {
		return nil
	}
	defer status.Close()
	msg := make([]byte, len(hook.WaitRecord(0)))
	if _, err := io.ReadFull(status, msg); err != nil {
		return nil
	}
	raw, ok := hook.ParseWait(msg)
	if !ok {
		return nil
	}
	ws := syscall.WaitStatus(raw)
	return &ws
}

// buildResult turns the helper's wait status (or, from an init, the
// program's: prog) and rusage into a Result.
func buildResult(st *os.ProcessState, err error, wall time.Duration, lim Limits, killedByUs bool, prog *syscall.WaitStatus) Result {
	res := Result{Wall: wall, ExitCode: -1}
	if err != nil {
		res.Err = fmt.Errorf("sandbox: wait: %w", err)
		return res
	}
	ws, _ := st.Sys().(syscall.WaitStatus)
	if prog != nil {
		ws = *prog
	}
	var cpu time.Duration
	var maxRSS int64
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok && ru != nil {
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		maxRSS = int64(ru.Maxrss) * 1024 // Maxrss is int32 on 32-bit platforms
	}
	return resultOf(ws, cpu, maxRSS, wall, lim, killedByUs)
}

// resultOf is the Result of a program that ended with ws after using cpu
// and at most maxRSS bytes.
func resultOf(ws syscall.WaitStatus, cpu time.Duration, maxRSS int64, wall time.Duration, lim Limits, killedByUs bool) Result {
	res := Result{Wall: wall, ExitCode: -1, CPU: cpu, MaxRSS: maxRSS}
	if ws.Signaled() {
		res.Signal = ws.Signal()
	} else {
		res.ExitCode = ws.ExitStatus()
	}
	switch {
	// RLIMIT_CPU's SIGKILL at the hard limit; a SIGKILL codellm sent itself
	// is never attributed to a limit.
	case res.Signal == syscall.SIGXCPU,
		res.Signal == syscall.SIGKILL && !killedByUs && cpuLimitReached(res.CPU, lim.CPUTime):
		res.Limit = LimitCPU
	case res.Signal == syscall.SIGXFSZ:
		res.Limit = LimitFileSize
	}
	res.LimitDesc = describeLimit(res.Limit, lim)
	return res
}

// cpuLimitReached reports whether a block that used cpu could have been
// killed by RLIMIT_CPU at limit. The kernel checks the limit against the
// tick-sampled utime+stime, while the rusage and cgroup figures codellm gets
// are the precise runtime: under CPU contention the ticks over-charge a
// process that runs in slices shorter than a tick, so the kill comes with
// less precise CPU than the limit (measured on a 2-core VM, 1 s limit:
// 870-994 ms at load 20, 781 ms at load 40). Half the limit keeps such kills
// attributed and still tells apart a program that SIGKILLs itself early.
func cpuLimitReached(cpu, limit time.Duration) bool {
	return limit > 0 && cpu >= limit/2
}

func pidsHit(g *cgroup.Group) bool {
	st, err := g.Stats()
	return err == nil && st.PidsMax > 0
}

func (p *Process) signal(sig syscall.Signal) {
	pp := &p.plat
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.reaped {
		return
	}
	if pp.pgKill {
		_ = syscall.Kill(-p.pid, sig)
		return
	}
	if pp.status != nil {
		// An init: the signal is for the program, not for the init, which
		// ignores it (hook.runInit).
		if prog := programProcess(p.pid, pp.progPID); prog != nil {
			_ = prog.Signal(sig)
			_ = prog.Release()
		}
		return
	}
	_ = pp.osp.Signal(sig)
}

func (p *Process) kill() {
	pp := &p.plat
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.reaped {
		return
	}
	pp.killed = true
	if pp.pgKill {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		if pp.group != nil {
			_ = pp.group.Kill()
		}
	}
	if pp.collect != nil {
		if !pp.recorded {
			// End the program but keep its files for Collect; kill outright should the init not report.
			_ = pp.osp.Signal(hook.HoldSignal)
			time.AfterFunc(holdKillGrace, p.killUnrecorded)
		}
		return // held: the reaper kills the init after Collect
	}
	_ = pp.osp.Signal(syscall.SIGKILL)
}

// killUnrecorded kills a holding init that has not reported within holdKillGrace of Kill.
func (p *Process) killUnrecorded() {
	pp := &p.plat
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if !pp.reaped && !pp.recorded {
		_ = pp.osp.Signal(syscall.SIGKILL)
	}
}

// chownTree gives dir and everything below it to uid:gid without following
// symlinks at any level (descriptor-relative walk), so a concurrently
// swapped symlink cannot redirect a root chown onto host files.
func chownTree(dir string, uid, gid int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	return chownAt(fd, uid, gid, 0)
}

func chownAt(fd, uid, gid, depth int) error {
	if depth > 64 {
		return errors.New("workdir nests deeper than 64 levels")
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), "dir")
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := unix.Fchownat(fd, n, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not a directory (or a symlink): nothing below it
		}
		err = chownAt(sub, uid, gid, depth+1)
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}
