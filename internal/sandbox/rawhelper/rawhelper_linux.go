//go:build linux && (amd64 || arm64)

package rawhelper

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/rawchild"
	"golang.org/x/sys/unix"
)

// Descriptors of the raw helper (rawchild's 0..3, then Attr.Extra): the
// workdir, a directory descriptor or a detached tree (hook.Spec.DirIsTree).
const DirFD = 4

// Without a private root the plan names the workdir in its Landlock rules by
// the Go helper's descriptor (hook.DirFD); here that number is another
// descriptor (NetFD: a socket, which Landlock refuses with EBADFD), so the
// rule is rewritten to this helper's DirFD.
var (
	goHelperDirPath = "/proc/self/fd/" + strconv.Itoa(hook.DirFD)
	dirPath         = "/proc/self/fd/" + strconv.Itoa(DirFD)
)

// Host is what the compiler needs beyond the spec: facts of the process
// that forks the helper (the spawner), which the server cannot see.
type Host struct {
	// Overlaid are the host directories the spawner overlaid in place;
	// with hook.MOverlay every mirrored directory must be one of them (a
	// block that needs its own overlay gets the Go helper).
	Overlaid []string
	// CgroupFiles are the cgroup v1 files of the block's group the helper
	// joins by writing "0" before it runs anything else (tasks files: it is
	// single-threaded; see cgroup.Group.TaskFiles); empty when clone3 places
	// it (v2) or there is no group.
	CgroupFiles []string
	// UID and GID are the ids the helper takes inside its user namespace
	// before it mounts anything (its maps are written by then).
	UID, GID int
	// Dir is the workdir's descriptor in the compiling process, listed for
	// a private copy (hook.Spec.Persist false); the helper gets it as DirFD.
	Dir int
	// Unshare are the namespaces (CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWIPC,
	// CLONE_NEWUTS) the helper makes itself, first thing after it joined its
	// cgroup, rather than its clone (AtClone): so the spawner's loop, which
	// clones one helper at a time, does not pay for them.
	Unshare uintptr
}

// AtClone are the namespaces the raw helper's clone itself must make: the
// user namespace its maps are written for (by the forking process) and the
// PID namespace it is the init of. Every other one it unshares itself
// (Host.Unshare).
const AtClone = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID

// unshareSteps are the namespaces a helper may unshare itself, each with
// the mechanism its failure names.
var unshareSteps = []struct {
	flag uintptr
	mech uint32
	what string
}{
	{syscall.CLONE_NEWNS, hook.MMountNS, "unshare mount namespace"},
	{syscall.CLONE_NEWNET, hook.MNetNS, "unshare network namespace"},
	{syscall.CLONE_NEWIPC, hook.MIPCNS, "unshare IPC namespace"},
	{syscall.CLONE_NEWUTS, hook.MUTSNS, "unshare UTS namespace"},
}

// FallbackError says why a spec needs the Go helper. Nothing was started.
type FallbackError struct{ Reason string }

func (e *FallbackError) Error() string { return "rawhelper: needs the Go helper: " + e.Reason }

func fallback(format string, args ...any) error {
	return &FallbackError{Reason: fmt.Sprintf(format, args...)}
}

// Compile turns sp into the raw helper's program, in p (Reset first, so
// that a caller compiling block after block reuses its memory), and the
// program it starts. A *FallbackError means the spec asks for something
// only the Go helper does; any other error is a spec that cannot be
// confined as asked.
func Compile(p *rawchild.Prog, sp *hook.Spec, h Host) (rawchild.Program, error) {
	p.Reset()
	if err := supported(sp); err != nil {
		return rawchild.Program{}, err
	}
	if err := namespaces(p, sp, h); err != nil {
		return rawchild.Program{}, err
	}
	p.Tag(hook.MHelper)
	p.Call("setresgid", syscall.SYS_SETRESGID, rawchild.Int(h.GID), rawchild.Int(h.GID), rawchild.Int(h.GID))
	p.Call("setresuid", syscall.SYS_SETRESUID, rawchild.Int(h.UID), rawchild.Int(h.UID), rawchild.Int(h.UID))
	feed, err := world(p, sp, h)
	if err != nil {
		return rawchild.Program{}, err
	}
	lockdown(p, sp)
	prog := rawchild.Program{Path: sp.Path, Args: sp.Args, Env: sp.Env, Direct: !sp.Init, InitTag: hook.MHelper}
	if sp.Hold {
		prog.Hold = hook.HoldSignal
	}
	if feed != nil {
		prog.Feed, prog.PinPID = feed, hook.ProgramPID
	}
	return prog, nil
}

// namespaces appends the helper's first steps: non-dumpable (while it holds
// capabilities in its namespace nothing there may ptrace it or read its
// memory), its own session, the cgroup join, the namespaces it makes itself,
// and a deterministic block's time namespace.
func namespaces(p *rawchild.Prog, sp *hook.Spec, h Host) error {
	p.Tag(hook.MHelper)
	p.Call("set non-dumpable", syscall.SYS_PRCTL, rawchild.Val(syscall.PR_SET_DUMPABLE), rawchild.Val(0))
	p.Call("setsid", syscall.SYS_SETSID)
	if len(h.CgroupFiles) > 0 {
		joinCgroup(p, h.CgroupFiles)
	}
	if err := unshare(p, h.Unshare); err != nil {
		return err
	}
	if sp.Mech&hook.MCgroupNS != 0 {
		p.Tag(hook.MCgroupNS)
		p.Call("unshare cgroup namespace", syscall.SYS_UNSHARE, rawchild.Val(syscall.CLONE_NEWCGROUP))
	}
	if len(sp.Determ) > 0 {
		return timeNamespace(p)
	}
	return nil
}

// world appends what the program will see, built while the helper still has
// its capabilities in the namespace: the private root (or the workdir), the
// host name, a deterministic block's seeded random stream (returned for the
// init), the egress listener.
func world(p *rawchild.Prog, sp *hook.Spec, h Host) (*rawchild.Feed, error) {
	has := func(m uint32) bool { return sp.Mech&m == m }
	if has(hook.MRootFS) {
		r, err := root(sp, h)
		if err != nil {
			return nil, err
		}
		p.Tag(hook.MRootFS)
		p.AddRoot(r)
	} else {
		p.Tag(hook.MHelper)
		p.Call("chdir to workdir "+sp.Dir, syscall.SYS_FCHDIR, rawchild.Val(DirFD))
	}
	if has(hook.MUTSNS) {
		p.Tag(hook.MUTSNS)
		host := []byte(sp.UTSName)
		p.Call("sethostname", syscall.SYS_SETHOSTNAME, rawchild.Val(p.Buf(host)), rawchild.Val(uintptr(len(host))))
		p.Call("setdomainname", syscall.SYS_SETDOMAINNAME, rawchild.Val(p.Str("(none)")), rawchild.Val(6))
	}
	var feed *rawchild.Feed
	if len(sp.Determ) > 0 {
		var err error
		if feed, err = seeded(p, sp); err != nil {
			return nil, err
		}
	}
	if sp.Egress {
		egress(p)
	}
	return feed, nil
}

// supported refuses what only the Go helper does: the trial spawn, a block
// without its own user namespace.
func supported(sp *hook.Spec) error {
	need := hook.MHelper | hook.MUserNS
	switch {
	case sp.ProbeOnly || sp.ProbeSocket != "":
		return fallback("the trial spawn")
	case sp.Mech&need != need:
		return fallback("the block has no user namespace of its own")
	}
	return nil
}

// unshare appends one unshare per namespace of flags, so that a failure
// names its namespace.
func unshare(p *rawchild.Prog, flags uintptr) error {
	left := flags
	for _, u := range unshareSteps {
		if flags&u.flag != 0 {
			p.Tag(u.mech)
			p.Call(u.what, syscall.SYS_UNSHARE, rawchild.Val(u.flag))
			left &^= u.flag
		}
	}
	if left != 0 {
		return fmt.Errorf("rawhelper: cannot unshare namespaces %#x in the helper", left)
	}
	return nil
}

// joinCgroup writes "0" (the writer) to each cgroup file: the helper
// joins the block's group before anything of the block runs, with the
// permission of the uid it was cloned with (the files are the server's).
func joinCgroup(p *rawchild.Prog, files []string) {
	p.Tag(hook.MCgroup)
	fd := p.NewSlot()
	zero := p.Str("0")
	for _, f := range files {
		p.CallTo("join block cgroup: open "+f, fd, syscall.SYS_OPENAT, rawchild.Int(unix.AT_FDCWD), rawchild.Val(p.Str(f)),
			rawchild.Val(syscall.O_WRONLY|syscall.O_CLOEXEC), rawchild.Val(0))
		p.Call("join block cgroup: write "+f, syscall.SYS_WRITE, fd.Arg(), rawchild.Val(zero), rawchild.Val(1))
		p.Expect(1)
		p.Call("join block cgroup: close "+f, syscall.SYS_CLOSE, fd.Arg())
	}
}

// root is the block's private root as package hook builds it: the system
// directories and /etc entries mirrored (with hook.MOverlay through
// read-only overlays: the spawner's, made once, or the block's own), the
// generated /etc files, the shared dir, /dev, /proc (host files masked),
// /tmp, and the workdir.
func root(sp *hook.Spec, h Host) (rawchild.Root, error) {
	r := rawchild.Root{Staging: sp.Staging, Size: 1 << 20, Inodes: 4096, Proc: true, ProcMasked: hook.ProcMasked,
		DevNodes: sp.DevNodes, TmpSize: sp.TmpSize, TmpInodes: hook.TmpfsInodes(sp.TmpSize), Dir: sp.Dir, OverlayTag: hook.MOverlay}
	m := &mirrors{r: &r, overlay: sp.Mech&hook.MOverlay != 0, inPlace: h.Overlaid, mounts: sp.HostMounts}
	for _, d := range sp.SystemDirs {
		if err := m.mirror(d, d, true); err != nil {
			return r, err
		}
	}
	if m.overlay && !m.overlaid("/etc") && !m.hasBelow("/etc") && isDir("/etc") {
		// One overlay serves every entry (a block's end waits for a grace
		// period per overlay), made on /etc itself in the helper's namespace.
		r.InPlace = append(r.InPlace, "/etc")
		m.inPlace = append(m.inPlace, "/etc")
	}
	for _, e := range sp.EtcEntries {
		if err := m.mirror("/etc/"+e, "/etc/"+e, false); err != nil {
			return r, err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"passwd", sp.Passwd}, {"group", sp.Group}, {"hosts", sp.Hosts}, {"hostname", sp.Hostname}} {
		r.Files = append(r.Files, rawchild.File{Path: "/etc/" + f.name, Data: f.data, Mode: 0o644})
	}
	if len(sp.FakeTimeRC) > 0 {
		// libfaketime's fallback where bash's own getenv hides FAKETIME (see package hook's writeFakeTimeRC).
		r.Files = append(r.Files, rawchild.File{Path: "/etc/faketimerc", Data: sp.FakeTimeRC, Mode: 0o444})
	}
	if sp.Shared != "" {
		// Taken before the staging tmpfs covers it, should it be below (a work dir under /tmp).
		b := rawchild.Bind{Source: sp.Shared, Target: hook.SharedMount, Early: true}
		if m.overlay && !m.overlaid(sp.Shared) {
			b.Overlay, b.NoExec = true, noexec(sp.Shared)
		}
		r.Binds = append(r.Binds, b)
		r.Links = append(r.Links, rawchild.Link{Path: "/node_modules", To: hook.SharedMount + "/node"})
	}
	w, err := workdir(sp, h)
	if err != nil {
		return r, err
	}
	r.Work = w
	return r, nil
}

// maxSplit bounds the entries a root mirrors one by one because host mounts
// lie below their directory (each a mount and a root-tmpfs inode), as
// package hook's does.
const maxSplit = 1024

// mirrors adds host paths to a root as package hook's sysTree does:
// directories through overlays unless the spawner overlaid them in place
// (or binds without hook.MOverlay), split entry by entry where host mounts
// lie below them (an overlay refuses a lower layer with mounts below it).
type mirrors struct {
	r       *rawchild.Root
	overlay bool
	inPlace []string // directories overlaid in place: bound, not overlaid again
	mounts  []string // host mount points below the mirrored directories (hook.Spec.HostMounts)
	split   int
}

func (m *mirrors) mirror(src, dst string, dirsOnly bool) error {
	var st unix.Stat_t
	err := unix.Lstat(src, &st)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || !m.overlay || m.overlaid(src) {
		return m.r.MirrorStat(src, dst, dirsOnly, &st, err)
	}
	if m.hasBelow(src) {
		return m.splitDir(src, dst)
	}
	m.r.Binds = append(m.r.Binds, rawchild.Bind{Source: src, Target: dst, Overlay: true, NoExec: noexec(src)})
	return nil
}

// splitDir mirrors the entries of src one by one into dst.
func (m *mirrors) splitDir(src, dst string) error {
	d, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("rawhelper: list %s: %w", src, err)
	}
	names, err := readNames(d)
	unix.Close(d)
	if err != nil {
		return fmt.Errorf("rawhelper: list %s: %w", src, err)
	}
	if m.split += len(names); m.split > maxSplit {
		return fallback("host mounts below %s leave more than %d entries to mirror one by one", src, maxSplit)
	}
	for _, n := range names {
		if err := m.mirror(src+"/"+n, dst+"/"+n, false); err != nil {
			return err
		}
	}
	return nil
}

// overlaid reports whether src is a directory overlaid in place or below one.
func (m *mirrors) overlaid(src string) bool {
	for _, d := range m.inPlace {
		if src == d || strings.HasPrefix(src, d+"/") {
			return true
		}
	}
	return false
}

// hasBelow reports whether a host mount lies below directory src.
func (m *mirrors) hasBelow(src string) bool {
	for _, mp := range m.mounts {
		if strings.HasPrefix(mp, src+"/") {
			return true
		}
	}
	return false
}

func isDir(p string) bool {
	var st unix.Stat_t
	return unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// noexec reports whether the mount holding p is noexec (an overlay of it
// must be too: it is a mount of its own).
func noexec(p string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(p, &fs) == nil && fs.Flags&unix.ST_NOEXEC != 0
}

// Bounds of a workdir the raw helper copies; a larger one gets the Go
// helper, whose copy reports a workdir too large for its tmpfs precisely.
const (
	maxCopyEntries = 256
	maxCopyDepth   = 16
)

// workdir is the block's workdir: the server's detached tree (persistent),
// or a tmpfs with a copy of the directory h.Dir.
func workdir(sp *hook.Spec, h Host) (*rawchild.Work, error) {
	if sp.Persist && sp.DirIsTree {
		return &rawchild.Work{Dir: sp.Dir, TreeFD: DirFD, ReadOnly: sp.ReadOnly}, nil
	}
	if sp.Persist {
		// The server is not root and could not clone the workdir's mount: the
		// helper does, by path, in its namespace (its uid, the server's, can
		// traverse the parents).
		return &rawchild.Work{Dir: sp.Dir, TreePath: sp.HostDir, ReadOnly: sp.ReadOnly}, nil
	}
	size := sp.WorkdirSize()
	w := &rawchild.Work{Dir: sp.Dir, Size: size, Inodes: hook.TmpfsInodes(size), FromFD: DirFD}
	var total int64
	if err := list(h.Dir, "", 0, &w.Copy, &total); err != nil {
		return nil, err
	}
	// Half the tmpfs at most: the pages and inodes the copy takes beyond its
	// bytes are the tmpfs's to count; near the bound the Go helper's copy
	// says precisely that the workdir does not fit.
	if size > 0 && total > size/2 {
		return nil, fallback("a workdir of %d bytes in a tmpfs of %d", total, size)
	}
	return w, nil
}

// list appends the entries below the directory open at fd (prefix its
// name relative to the workdir), parents first, without following links.
func list(fd int, prefix string, depth int, out *[]rawchild.Entry, total *int64) error {
	if depth > maxCopyDepth {
		return fallback("a workdir deeper than %d levels", maxCopyDepth)
	}
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("rawhelper: list the workdir: %w", err)
	}
	for _, n := range names {
		if len(*out) >= maxCopyEntries {
			return fallback("a workdir of more than %d entries", maxCopyEntries)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("rawhelper: stat workdir entry %s: %w", path.Join(prefix, n), err)
		}
		name := path.Join(prefix, n)
		e := rawchild.Entry{Name: name, Mode: st.Mode}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			e.Size = st.Size
			*total += st.Size
		case unix.S_IFLNK:
			buf := make([]byte, unix.PathMax)
			k, err := unix.Readlinkat(fd, n, buf)
			if err != nil {
				return fmt.Errorf("rawhelper: readlink workdir entry %s: %w", name, err)
			}
			e.Link = string(buf[:k])
		case unix.S_IFDIR:
			*out = append(*out, e)
			sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("rawhelper: open workdir entry %s: %w", name, err)
			}
			err = list(sub, name, depth+1, out, total)
			unix.Close(sub)
			if err != nil {
				return err
			}
			continue
		default:
			continue // sockets, fifos, devices: package hook's copy skips them too
		}
		*out = append(*out, e)
	}
	return nil
}

// readNames lists the directory open at fd, through a descriptor of its
// own so fd's offset is left alone.
func readNames(fd int) ([]string, error) {
	d, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(d)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(d, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// lockdown appends the per-thread confinement in package hook's order,
// each part tagged with its mechanism.
func lockdown(p *rawchild.Prog, sp *hook.Spec) {
	has := func(m uint32) bool { return sp.Mech&m == m }
	if has(hook.MRlimit) {
		p.Tag(hook.MRlimit)
		lim := []rawchild.Rlimit{{Name: "CORE", Resource: unix.RLIMIT_CORE, Value: 0}}
		for _, l := range []struct {
			name string
			res  int
			v    uint64
		}{{"FSIZE", unix.RLIMIT_FSIZE, uint64(sp.FileSize)}, {"NOFILE", unix.RLIMIT_NOFILE, uint64(sp.OpenFiles)},
			{"CPU", unix.RLIMIT_CPU, sp.CPUSeconds}} {
			if l.v > 0 {
				lim = append(lim, rawchild.Rlimit{Name: l.name, Resource: l.res, Value: l.v})
			}
		}
		p.AddLockdown(rawchild.Lockdown{Rlimits: lim})
	}
	if has(hook.MNoNewPrivs) {
		p.Tag(hook.MNoNewPrivs)
		p.AddLockdown(rawchild.Lockdown{NoNewPrivs: true})
	}
	if has(hook.MLandlock) {
		p.Tag(hook.MLandlock)
		ll := &rawchild.Landlock{ABI: int(sp.LandlockABI), HandledFS: sp.HandledFS, HandledNet: sp.HandledNet, Scoped: sp.Scoped}
		for _, r := range sp.Rules {
			path := r.Path
			if path == goHelperDirPath {
				path = dirPath // the same workdir, at this helper's descriptor
			}
			ll.Rules = append(ll.Rules, rawchild.LandlockRule{Path: path, Access: r.Access, Optional: r.Optional})
		}
		if sp.Egress && sp.HandledNet&unix.LANDLOCK_ACCESS_NET_CONNECT_TCP != 0 {
			ll.ConnectTCP = []uint16{hook.EgressPort} // the egress listener, and nothing else
		}
		p.AddLockdown(rawchild.Lockdown{Landlock: ll})
	}
	if has(hook.MCaps) {
		p.Tag(hook.MCaps)
		p.AddLockdown(rawchild.Lockdown{DropCaps: true, CapLastCap: int(sp.CapLastCap)})
	}
	if has(hook.MSeccomp) {
		p.Tag(hook.MSeccomp)
		p.AddLockdown(rawchild.Lockdown{Seccomp: sp.Seccomp})
	}
}
