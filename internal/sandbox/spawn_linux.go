//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
	"github.com/codellm/codellm/internal/sandbox/hook"
	"golang.org/x/sys/unix"
)

// cloneSpec is everything a helper's clone depends on: its namespaces, the
// host identity its uid maps point at, and the capabilities it keeps into
// its setup.
type cloneSpec struct {
	use      mechSet
	uid, gid int
	egress   bool // CAP_NET_ADMIN: bring up the namespace's loopback
	determ   bool // CAP_SYS_TIME: time namespace offsets (dropped before exec)
	// outside: the helper is moved into its cgroup after the clone, not born
	// in it (no clone3: platform.noClone3)
	outside bool
}

// launched is a helper that exists and waits for its spec: deliver sends it.
type launched struct {
	osp     *os.Process
	statR   *os.File
	start   time.Time
	joined  bool // already inside the block's cgroup
	raw     bool // the raw helper (rawStart): its spec is compiled in already
	deliver func(spec []byte) error
	// overlaid: the host directories its namespace has overlaid in place
	// already (startHelper), for its spec.
	overlaid []string
	// netParent: with egress, the server's end of the socket the helper
	// sends its listener on (closed by finishStart).
	netParent *os.File
}

// overlaidRoot reports whether a block with mechanisms use shows host
// directories through overlays in a private root: only such a block's helper
// may come from a spawner that overlaid them (startHelper).
func overlaidRoot(use mechSet) bool { return use.has(mRootFS | mOverlay) }

// spawnIn starts the helper with the mechanisms in use, inside cgroup
// child when given: the raw helper when it serves the block, else the Go
// helper. Either way the helper has fresh namespaces, sits inside child
// before it reads its spec, and serves this block only.
func (r *Run) spawnIn(spec *Spec, use mechSet, probe bool, child *cgroup.Group) (*Process, error) {
	Trace("s.spawn")
	s := r.sb
	p := &s.plat
	if !use.has(mHelper) {
		return nil, &UnavailableError{Mechanism: MechHelper, Reason: p.detail[mHelper], Fix: mechFix(mHelper)}
	}
	use = blockUse(use, s.cfg.Network, child)
	egressOn := r.egress != nil && !probe
	if egressOn && !use.has(mNetNS) {
		return nil, &UnavailableError{Mechanism: MechNetNS, Reason: "the egress proxy needs the block's own network namespace", Fix: mechFix(mNetNS)}
	}
	uid, gid, err := blockIdentity(spec, p)
	if err != nil {
		return nil, err
	}
	cl := cloneSpec{use: use, uid: uid, gid: gid, egress: egressOn, determ: spec.Deterministic != nil, outside: p.noClone3}
	hs, err := r.helperSpec(spec, use, probe)
	if err != nil {
		return nil, err
	}
	bf, err := openBlockFiles(spec, p, use, hs)
	if err != nil {
		return nil, err
	}
	defer bf.close()
	if r.rawCandidate(spec, cl, hs) {
		if proc, ok, err := r.startRaw(spec, hs, cl, bf, child); ok {
			return proc, err
		}
	}
	hl, err := r.coldStart(cl, bf, child)
	if err != nil {
		return nil, err
	}
	return r.finishStart(spec, hs, hl, cl, child)
}

// startRaw starts the block on the raw helper; ok false means the Go helper
// serves it. The raw helper's root follows the server's mount table, read at
// most once a second: an overlay the kernel refuses because a host mount
// appeared below its directory since (staleMountsError) is built once more,
// from a fresh read, before the block is refused. Nothing of the block ran.
func (r *Run) startRaw(spec *Spec, hs *hook.Spec, cl cloneSpec, bf *blockFiles, child *cgroup.Group) (*Process, bool, error) {
	for try := 0; ; try++ {
		hl, ok, err := r.rawStart(cl, bf, hs, child)
		if err != nil || !ok {
			return nil, ok, err
		}
		proc, err := r.finishStart(spec, hs, hl, cl, child)
		var stale *staleMountsError
		if errors.As(err, &stale) {
			if try == 0 {
				hostMounts.refresh()
				hs.HostMounts = hostMountsBelowRoot()
				continue
			}
			err = stale.err
		}
		return proc, true, err
	}
}

// finishStart places a launched helper in its cgroup, hands it the spec and
// waits until the program runs (or the helper says why it cannot).
func (r *Run) finishStart(spec *Spec, hs *hook.Spec, hl *launched, cl cloneSpec, child *cgroup.Group) (*Process, error) {
	defer closeIfSet(hl.netParent)
	osp := hl.osp
	keepStat := false
	defer func() {
		if !keepStat {
			hl.statR.Close()
		}
	}()
	proc := &Process{run: r, pid: osp.Pid, start: hl.start, ready: make(chan struct{}), done: make(chan struct{})}
	proc.plat = procPlatform{osp: osp, pgKill: !cl.use.has(mPIDNS), limits: r.lim, started: hl.start, group: child, runGrp: r.plat.group}
	proc.plat.setHold(spec, hs, osp.Pid)

	// v1 (and a Go helper the spawner cloned on v2): join the block's cgroup
	// now, while the helper is blocked reading its spec and so has run
	// nothing of the user's.
	if child != nil && !hl.joined {
		if err := child.Add(osp.Pid); err != nil {
			killWait(osp)
			return nil, &UnavailableError{Mechanism: MechCgroup, Reason: "join block cgroup: " + err.Error(), Fix: mechFix(mCgroup)}
		}
	}
	if !hl.raw {
		if overlaidRoot(mechSet(hs.Mech)) {
			hs.Overlaid = hl.overlaid
		}
		_ = hl.deliver(hs.Encode()) // a failure means the helper died; the status pipe says why
	}

	Trace("s.delivered")
	msg, progPID, rerr := readStarted(hl.statR, hs.Init)
	Trace("s.started")
	if rerr != nil || len(msg) == 0 || msg[0] != hook.Started || len(msg) > 1 {
		_ = osp.Kill()
		st, _ := osp.Wait()
		err := helperFailure(msg, rerr, st)
		if hl.raw && overlayRefused(msg) {
			err = &staleMountsError{err}
		}
		return nil, err
	}
	if hl.netParent != nil {
		ln, err := receiveListener(hl.netParent)
		if err != nil {
			killWait(osp)
			return nil, &UnavailableError{Mechanism: MechNetNS, Reason: err.Error(), Fix: mechFix(mNetNS)}
		}
		proc.plat.egressLn = ln
		go r.egress.Serve(ln)
	}
	if hs.Init {
		keepStat, proc.plat.status, proc.plat.progPID = true, hl.statR, progPID
	}
	go proc.reap()
	return proc, nil
}

// blockUse narrows the run's mechanisms to what one block can get: no
// network namespace with --network, no private root without the mount and
// PID namespaces it needs (its /proc must be the block's PID namespace),
// no cgroup namespace without a block group to root it at.
func blockUse(use mechSet, network bool, child *cgroup.Group) mechSet {
	if network {
		use &^= mNetNS
	}
	if !use.has(mMountNS) || !use.has(mPIDNS) {
		use &^= mRootFS
	}
	if child == nil {
		use &^= mCgroupNS
	}
	return use
}

// helperSpec is the spec the helper applies: the program, its limits and
// every confinement the server computes (root contents, Landlock rules,
// the seccomp program, determinism).
func (r *Run) helperSpec(spec *Spec, use mechSet, probe bool) (*hook.Spec, error) {
	s := r.sb
	hs := &hook.Spec{
		Path: spec.Path, Args: spec.Args, Env: spec.Env, Dir: spec.Dir, HostDir: spec.Dir, Persist: spec.Persist, ReadOnly: spec.ReadOnly,
		Network: s.cfg.Network, TmpSize: r.lim.TmpSize, WorkSize: spec.WorkdirSize, FileSize: r.lim.FileSize,
		OpenFiles: int64(r.lim.OpenFiles), ProbeOnly: probe, CapLastCap: capLastCap(), Shared: s.cfg.Shared,
		Init: use.has(mPIDNS) && !s.cfg.ProgramAsPID1, Mech: uint32(use),
	}
	// The init holds the namespace once the program is over, for the collect.
	hs.Hold = spec.Collect != nil && hs.Init && !probe
	if r.lim.CPUTime > 0 {
		hs.CPUSeconds = uint64((r.lim.CPUTime + time.Second - 1) / time.Second)
	}
	if hs.Env == nil {
		hs.Env = []string{}
	}
	if r.egress != nil && !probe {
		hs.Egress, hs.Env = true, proxyEnv(hs.Env)
	}
	if use.has(mRootFS) && spec.MountAt != "" {
		hs.Dir = spec.MountAt
	}
	if use.has(mRootFS) {
		rootContents(hs)
	}
	if use.has(mLandlock) {
		landlockPlan(hs, s.plat.landlockABI, use.has(mRootFS))
	}
	if use.has(mSeccomp) {
		prog, err := seccompProgram()
		if err != nil {
			return nil, &UnavailableError{Mechanism: MechSeccomp, Reason: err.Error(), Fix: mechFix(mSeccomp)}
		}
		hs.Seccomp = prog
	}
	if d := spec.Deterministic; d != nil {
		if err := determinismPlan(hs, d, use); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

// blockFiles are the block's descriptors the helper gets: stdin (opened
// /dev/null when the spec has none), stdout, stderr and the workdir.
type blockFiles struct {
	stdin, stdout, stderr, dir *os.File
	owned                      []*os.File // opened here, closed once the helper has its copies
}

func (bf *blockFiles) close() {
	for _, f := range bf.owned {
		f.Close()
	}
}

func (bf *blockFiles) list() []*os.File { return []*os.File{bf.stdin, bf.stdout, bf.stderr, bf.dir} }

// openBlockFiles opens the block's stdin and workdir descriptors.
func openBlockFiles(spec *Spec, p *platform, use mechSet, hs *hook.Spec) (*blockFiles, error) {
	bf := &blockFiles{stdin: spec.Stdin, stdout: spec.Stdout, stderr: spec.Stderr}
	if bf.stdin == nil {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, fmt.Errorf("sandbox: open %s: %w", os.DevNull, err)
		}
		bf.stdin, bf.owned = f, append(bf.owned, f)
	}
	if spec.Persist && p.euid == 0 && use.has(mRootFS) {
		// A descriptor of a mount in the server's namespace cannot be bound
		// from the helper's namespace, and the helper's unprivileged uid may
		// not traverse the workdir's parents. A detached copy of the mount
		// (open_tree) can be attached anywhere by the helper.
		fd, err := unix.OpenTree(unix.AT_FDCWD, spec.Dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			bf.close()
			return nil, &UnavailableError{Mechanism: MechRootFS, Reason: "open_tree of the workdir: " + err.Error(), Fix: mechFix(mRootFS)}
		}
		bf.dir, hs.DirIsTree = os.NewFile(uintptr(fd), "workdir-tree"), true
	} else {
		f, err := os.OpenFile(spec.Dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
		if err != nil {
			bf.close()
			return nil, fmt.Errorf("%w: open workdir: %v", ErrInvalidSpec, err)
		}
		bf.dir = f
	}
	bf.owned = append(bf.owned, bf.dir)
	return bf, nil
}

// helperAttr is the helper's clone: its namespaces, the uid and gid maps
// onto the block's host identity, and the capabilities its setup needs
// (all dropped before the program runs).
func helperAttr(cl cloneSpec, euid int, child *cgroup.Group) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	var caps []uintptr
	if cl.use.has(mUserNS) || (euid == 0 && cl.uid != 0) {
		caps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP}
		if cl.egress {
			caps = append(caps, unix.CAP_NET_ADMIN) // bring up lo
		}
	}
	if cl.use.has(mUserNS) {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: sandboxUID, HostID: cl.uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: sandboxGID, HostID: cl.gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		attr.Credential = &syscall.Credential{Uid: sandboxUID, Gid: sandboxGID, NoSetGroups: true}
	} else if euid == 0 && cl.uid != 0 {
		// No user namespace but root: still never run code as host root.
		attr.Credential = &syscall.Credential{Uid: uint32(cl.uid), Gid: uint32(cl.gid), Groups: []uint32{}}
	}
	attr.AmbientCaps = caps
	for _, ns := range []struct {
		bit  mechSet
		flag uintptr
	}{{mPIDNS, syscall.CLONE_NEWPID}, {mMountNS, syscall.CLONE_NEWNS}, {mNetNS, syscall.CLONE_NEWNET},
		{mIPCNS, syscall.CLONE_NEWIPC}, {mUTSNS, syscall.CLONE_NEWUTS}} {
		if cl.use.has(ns.bit) {
			attr.Cloneflags |= ns.flag
		}
	}
	if child != nil && !cl.outside {
		if fd, ok := child.FD(); ok {
			attr.UseCgroupFD, attr.CgroupFD = true, fd // v2: born inside, no race
		}
	}
	if cl.determ {
		attr.AmbientCaps = append(attr.AmbientCaps, unix.CAP_SYS_TIME) // time namespace offsets; dropped before exec
	}
	return attr
}

// coldStart clones a helper for this block now, with its descriptors in
// place and a pipe for its spec (and with egress, the socket it sends its
// listener on).
func (r *Run) coldStart(cl cloneSpec, bf *blockFiles, child *cgroup.Group) (*launched, error) {
	netParent, netChild, err := egressFiles(cl)
	if err != nil {
		return nil, err
	}
	defer closeIfSet(netChild)
	var extra []*os.File
	if netChild != nil {
		extra = []*os.File{netChild}
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		closeIfSet(netParent)
		return nil, fmt.Errorf("sandbox: spec pipe: %w", err)
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		specR.Close()
		specW.Close()
		closeIfSet(netParent)
		return nil, fmt.Errorf("sandbox: status pipe: %w", err)
	}
	attr := helperAttr(cl, r.sb.plat.euid, child)
	start := time.Now()
	osp, overlaid, inside, err := r.sb.plat.startHelper(helperEnv, append(append(bf.list()[:3:3], specR, statW, bf.dir), extra...), attr, overlaidRoot(cl.use))
	specR.Close()
	statW.Close()
	if err != nil {
		specW.Close()
		statR.Close()
		closeIfSet(netParent)
		return nil, startError(cl.use, inside, err)
	}
	deliver := func(b []byte) error {
		defer specW.Close()
		_, err := specW.Write(b)
		return err
	}
	return &launched{osp: osp, statR: statR, start: start, joined: inside, deliver: deliver, overlaid: overlaid,
		netParent: netParent}, nil
}

// egressFiles is the socket pair a block with egress sends its listener on
// (both nil without egress).
func egressFiles(cl cloneSpec) (parent, child *os.File, err error) {
	if !cl.egress {
		return nil, nil, nil
	}
	return egressPair()
}

func closeIfSet(f *os.File) {
	if f != nil {
		f.Close()
	}
}

func killWait(osp *os.Process) {
	_ = osp.Kill()
	_, _ = osp.Wait()
}
