//go:build linux && (amd64 || arm64)

package rawchild

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Root is a private root for a child in its own mount namespace: a fresh
// tmpfs on Staging with Binds in it, proc when asked, entered with
// pivot_root and the host's root detached, left read-only. It is the
// mechanism a block's root needs; which directories a block gets, and the
// spawner's overlays, stay the caller's choice.
type Root struct {
	// Staging is an existing host directory the tmpfs is mounted on, in the
	// child's mount namespace only (it is private there first).
	Staging string
	Size    int64 // the tmpfs's size in bytes (0: the kernel's default)
	// Inodes caps the inodes of the root's tmpfs, TmpInodes those of /tmp
	// and /dev/shm each (0: the kernel's default, half the RAM's pages):
	// empty files cost no size, only kernel memory.
	Inodes, TmpInodes int64
	Binds             []Bind
	Proc              bool   // mount a proc at /proc (needs the child's own PID namespace)
	Files             []File // written into the root before it is made read-only (/etc/passwd)
	// DevNodes are the host's /dev nodes bound into /dev (usable: no
	// nodev), beside /dev/fd, stdin, stdout, stderr and a /dev/shm tmpfs.
	DevNodes []string
	// TmpSize, when > 0, mounts tmpfs's of that size on /tmp and /dev/shm.
	TmpSize int64
	// ProcMasked are files below /proc covered with the host's /dev/null
	// (read-only); a file the kernel lacks is skipped.
	ProcMasked []string
	// Links are symbolic links made in the root (after the binds).
	Links []Link
	// OverlayTag, when set, tags the overlays' mounts instead of the tag
	// in force (Prog.Tag): their failure is the overlay mechanism's.
	OverlayTag uint32
	// InPlace are host directories overlaid on themselves in the child's
	// mount namespace before the binds (see Bind.Overlay), so that binds of
	// their entries show the overlay's: one overlay for /etc instead of one
	// per entry.
	InPlace []string
	// Work, when set, is the block's workdir, added after /tmp (it may be
	// below it).
	Work *Work
	Dir  string // the working directory inside the root ("" : /)
}

// Work is a workdir at Dir (absolute, inside the root; its missing parents
// are made 0755): a detached tree attached there (TreeFD, an open_tree
// descriptor the child has), or a private tmpfs of Size bytes and Inodes
// inodes, mode 0700, holding a copy of Copy, read from the directory open
// at FromFD in the child.
type Work struct {
	Dir    string
	TreeFD int
	// TreePath, instead of TreeFD, is a host path whose mount is cloned
	// (open_tree) by the child before the staging tmpfs covers anything:
	// a workdir the server could not clone itself (it is not root).
	TreePath string
	ReadOnly bool // TreeFD, TreePath: attached read-only
	Size     int64
	Inodes   int64
	FromFD   int
	Copy     []Entry
}

// Entry is one entry of a workdir copy: Name relative to the source
// directory (parents listed before what they hold), a directory, a regular
// file of Size bytes or a symbolic link to Link (Mode's type bits), with
// Mode's permission bits (directories get at least 0700, files 0600, as
// package hook's copy gives them).
type Entry struct {
	Name string
	Mode uint32
	Size int64
	Link string
}

// maxSendfile is the most one sendfile(2) moves; a larger file is refused
// (the caller copies such a workdir another way).
const maxSendfile = 0x7ffff000

// Bind shows Source (a host path) at Target (absolute, inside the root),
// recursively, read-only unless Writable, never with setuid or devices.
// An Optional source that does not exist is skipped. File makes the
// mount point a file instead of a directory.
type Bind struct {
	Source, Target string
	Writable       bool
	Optional       bool
	File           bool
	// TreeFD, when > 0, is the child's descriptor (Attr.Extra: 4, 5, ...)
	// of a detached tree to attach instead of Source: what open_tree
	// (OPEN_TREE_CLONE) made in the parent, as the server passes a block's
	// workdir.
	TreeFD int
	// Early takes Source (open_tree, a recursive clone; with Overlay, an
	// O_PATH descriptor) before the root's tmpfs covers Staging, for a
	// source below it; not with Optional.
	Early bool
	// Overlay shows the directory Source through a read-only overlay of it
	// instead of a bind: an overlay's socket inodes are its own, so a host
	// Unix socket below Source refuses connect() (ECONNREFUSED) where a
	// read-only bind would let it through. Its second lower layer is an
	// empty directory of the root that /proc covers later (the kernel
	// wants two lower layers without an upper one). NoExec adds noexec, as
	// Source's own mount has it.
	Overlay, NoExec bool
}

// emptyLayer is the overlays' second lower layer, relative to the staging
// root (the working directory while the root is built): it shows in
// mountinfo as "lowerdir=/usr:proc", naming nothing of the host beyond the
// mount point. /proc is mounted on it after the last overlay.
const emptyLayer = "proc"

// earlyFD is where an Early overlay's source descriptor is placed, so that
// its lower layer can be named /proc/self/fd/N by a step compiled before
// the descriptor exists (plus the bind's index).
const earlyFD = 100

// Link is a symbolic link at Path (absolute, inside the root) to To.
type Link struct{ Path, To string }

// Mirror adds host path src to r at dst the way package hook mirrors the
// host's system directories and /etc entries, deciding by what src is now
// (the caller sees the host the child will): a symbolic link becomes the
// same link, a directory a read-only bind, a regular file a read-only
// file bind unless dirsOnly, anything else (a socket, a device) and a
// missing src nothing.
func (r *Root) Mirror(src, dst string, dirsOnly bool) error {
	var st unix.Stat_t
	err := unix.Lstat(src, &st)
	return r.MirrorStat(src, dst, dirsOnly, &st, err)
}

// MirrorStat is Mirror for a caller that has lstat'ed src already (st and
// its error err), as a compiler checking what src is does.
func (r *Root) MirrorStat(src, dst string, dirsOnly bool, st *unix.Stat_t, err error) error {
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("rawchild: root: stat %s: %w", src, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		to, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("rawchild: root: readlink %s: %w", src, err)
		}
		r.Links = append(r.Links, Link{Path: dst, To: to})
	case unix.S_IFDIR:
		r.Binds = append(r.Binds, Bind{Source: src, Target: dst})
	case unix.S_IFREG:
		if !dirsOnly {
			r.Binds = append(r.Binds, Bind{Source: src, Target: dst, File: true})
		}
	}
	return nil
}

// File is a file of the root's own: Path absolute inside the root.
type File struct {
	Path string
	Data []byte
	Mode uint32
}

// AddRoot appends the steps that build and enter r.
func (p *Prog) AddRoot(r Root) {
	if !filepath.IsAbs(r.Staging) {
		p.fail(errors.New("rawchild: root: the staging directory must be absolute"))
		return
	}
	p.dirs, p.ovTag = p.dirs[:0], r.OverlayTag
	p.Call("make every mount private", syscall.SYS_MOUNT, Val(0), Val(p.Str("/")), Val(0), Val(syscall.MS_REC|syscall.MS_PRIVATE), Val(0))
	ok, fd := p.NewSlot(), p.NewSlot()
	early := p.takeEarly(r.Binds)
	work := Slot(-1)
	if w := r.Work; w != nil && w.TreePath != "" {
		work = p.CallSave("take workdir "+w.TreePath, unix.SYS_OPEN_TREE, Int(unix.AT_FDCWD), Val(p.Str(w.TreePath)),
			Val(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC))
	}
	opts := "mode=0755" + tmpfsSize(r.Size, r.Inodes)
	p.Call("mount the root's tmpfs on "+r.Staging, syscall.SYS_MOUNT, Val(p.Str("codellm-root")), Val(p.Str(r.Staging)),
		Val(p.Str("tmpfs")), Val(syscall.MS_NOSUID|syscall.MS_NODEV), Val(p.Str(opts)))
	if len(r.InPlace) > 0 || slices.ContainsFunc(r.Binds, func(b Bind) bool { return b.Overlay }) {
		p.addEmptyLayer(r)
	}
	for i, b := range r.Binds {
		if !filepath.IsAbs(b.Target) || filepath.Clean(b.Target) != b.Target || b.Target == "/" {
			p.fail(errors.New("rawchild: root: bind target " + strconv.Quote(b.Target) + " is not a clean absolute path below /"))
			return
		}
		p.addBind(r.Staging, b, ok, fd, early[i], earlyFD+i)
	}
	for _, l := range r.Links {
		if !filepath.IsAbs(l.Path) || filepath.Clean(l.Path) != l.Path || l.Path == "/" {
			p.fail(errors.New("rawchild: root: link " + strconv.Quote(l.Path) + " is not a clean absolute path below /"))
			return
		}
		p.mkdirs(r.Staging, filepath.Dir(l.Path))
		p.Call("symlink "+l.Path, syscall.SYS_SYMLINKAT, Val(p.Str(l.To)), Int(unix.AT_FDCWD), Val(p.Str(r.Staging+l.Path)))
	}
	for _, f := range r.Files {
		p.addFile(r.Staging, f, ok)
	}
	if len(r.DevNodes) > 0 || r.TmpSize > 0 {
		p.addDev(r, ok)
	}
	if r.TmpSize > 0 {
		p.addTmpfs(r.Staging, "/tmp", r.TmpSize, r.TmpInodes)
	}
	if r.Proc {
		p.addProc(r, ok)
	}
	if r.Work != nil {
		p.addWork(r.Staging, r.Work, work)
	}
	dot := p.Str(".")
	p.Call("chdir to the new root", syscall.SYS_CHDIR, Val(p.Str(r.Staging)))
	p.Call("pivot_root", syscall.SYS_PIVOT_ROOT, Val(dot), Val(dot))
	p.Call("detach the host's root", syscall.SYS_UMOUNT2, Val(dot), Val(syscall.MNT_DETACH))
	p.Call("make the root read-only", unix.SYS_MOUNT_SETATTR, Int(unix.AT_FDCWD), Val(p.Str("/")), Val(0),
		Val(p.mountAttr(unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)), Val(unix.MOUNT_ATTR_SIZE_VER0))
	dir := r.Dir
	if dir == "" {
		dir = "/"
	}
	p.Call("chdir to "+dir, syscall.SYS_CHDIR, Val(p.Str(dir)))
}

// takeEarly appends the steps that take every Early bind's source before
// the staging tmpfs covers it, and returns their slots (by bind).
func (p *Prog) takeEarly(binds []Bind) []Slot {
	early := make([]Slot, len(binds))
	for i, b := range binds {
		if !b.Early {
			continue
		}
		if b.Optional || b.TreeFD > 0 {
			p.fail(errors.New("rawchild: root: the early bind of " + strconv.Quote(b.Source) + " cannot be optional or a tree"))
			return early
		}
		if b.Overlay {
			early[i] = p.CallSave("open "+b.Source, syscall.SYS_OPENAT, Int(unix.AT_FDCWD), Val(p.Str(b.Source)),
				Val(unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC), Val(0))
			p.Call("place "+b.Source, syscall.SYS_DUP3, early[i].Arg(), Val(uintptr(earlyFD+i)), Val(unix.O_CLOEXEC))
			continue
		}
		early[i] = p.CallSave("take "+b.Source, unix.SYS_OPEN_TREE, Int(unix.AT_FDCWD), Val(p.Str(b.Source)),
			Val(unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE))
	}
	return early
}

// addEmptyLayer makes the overlays' empty layer in the staging root, which
// becomes the working directory, then the in-place overlays.
func (p *Prog) addEmptyLayer(r Root) {
	p.Call("chdir to the staging root", syscall.SYS_CHDIR, Val(p.Str(r.Staging)))
	at := r.Staging + "/" + emptyLayer
	p.dirs = append(p.dirs, at)
	p.Call("mkdir /"+emptyLayer, syscall.SYS_MKDIRAT, Int(unix.AT_FDCWD), Val(p.Str(at)), Val(0o555))
	for _, d := range r.InPlace {
		p.addOverlay(d, d, false)
	}
}

// addOverlay mounts a read-only overlay of lower on at (a path the child
// resolves; failures name src).
func (p *Prog) addOverlay(src, at string, noexec bool) {
	p.overlayTo(src, at, src, noexec, -1)
}

func (p *Prog) overlayTo(src, at, lower string, noexec bool, ok Slot) {
	if old := p.tag; p.ovTag != 0 {
		p.tag = p.ovTag
		defer func() { p.tag = old }()
	}
	flags := uintptr(syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV)
	if noexec {
		flags |= syscall.MS_NOEXEC
	}
	args := []Arg{Val(p.Str("overlay")), Val(p.Str(at)), Val(p.Str("overlay")), Val(flags),
		Val(p.Str("lowerdir=" + EscapeLayer(lower) + ":" + emptyLayer))}
	what := "mount a read-only overlay of " + src
	if ok >= 0 {
		p.CallTo(what, ok, syscall.SYS_MOUNT, args...)
		return
	}
	p.Call(what, syscall.SYS_MOUNT, args...)
}

// EscapeLayer escapes the characters overlayfs's option parser splits on
// (',' between options, ':' between layers) and its escape character.
func EscapeLayer(path string) string {
	r := strings.NewReplacer(`\`, `\\`, ",", `\,`, ":", `\:`)
	return r.Replace(path)
}

// addBind makes b's mount point and binds it (fd: a slot for a file's
// mount point, reused by every bind; tree: an Early bind's taken tree, or
// with Overlay its source placed at descriptor placed); ok is the slot that
// tells a missing optional source from a bound one.
func (p *Prog) addBind(staging string, b Bind, ok, fd, tree Slot, placed int) {
	at := staging + b.Target
	if b.File {
		// mknodat, not open and close: one step. Nothing but these steps made
		// the root's entries, so there is no link here to follow.
		p.mkdirs(staging, filepath.Dir(b.Target))
		p.Call("create the mount point "+b.Target, syscall.SYS_MKNODAT, Int(unix.AT_FDCWD), Val(p.Str(at)),
			Val(syscall.S_IFREG|0o644), Val(0))
		p.Allow(syscall.EEXIST)
	} else {
		p.mkdirs(staging, b.Target)
	}
	switch {
	case b.Overlay:
		lower := b.Source
		if b.Early {
			lower = "/proc/self/fd/" + strconv.Itoa(placed)
		}
		p.overlayTo(b.Source, at, lower, b.NoExec, ok)
		if b.Optional {
			p.Allow(syscall.ENOENT)
		}
		return
	case b.TreeFD > 0:
		p.CallTo("attach tree "+strconv.Itoa(b.TreeFD)+" on "+b.Target, ok, unix.SYS_MOVE_MOUNT, Val(uintptr(b.TreeFD)),
			Val(p.Str("")), Int(unix.AT_FDCWD), Val(p.Str(at)), Val(unix.MOVE_MOUNT_F_EMPTY_PATH))
	case b.Early:
		p.CallTo("attach "+b.Source+" on "+b.Target, ok, unix.SYS_MOVE_MOUNT, tree.Arg(),
			Val(p.Str("")), Int(unix.AT_FDCWD), Val(p.Str(at)), Val(unix.MOVE_MOUNT_F_EMPTY_PATH))
	default:
		p.CallTo("bind "+b.Source+" on "+b.Target, ok, syscall.SYS_MOUNT, Val(p.Str(b.Source)), Val(p.Str(at)), Val(0),
			Val(syscall.MS_BIND|syscall.MS_REC), Val(0))
	}
	set := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if !b.Writable {
		set |= unix.MOUNT_ATTR_RDONLY
	}
	attrs := func() {
		p.Call("set the attributes of "+b.Target, unix.SYS_MOUNT_SETATTR, Int(unix.AT_FDCWD), Val(p.Str(at)),
			Val(unix.AT_RECURSIVE), Val(p.mountAttr(set)), Val(unix.MOUNT_ATTR_SIZE_VER0))
	}
	if b.Optional {
		p.Allow(syscall.ENOENT)
		p.IfOK(ok, attrs)
	} else {
		attrs()
	}
}

// mkdirs makes every directory of dir (absolute, inside the root) below
// staging, the existing ones allowed; one an earlier step of this root made
// is not made again (the /etc of two dozen entries is one mkdir, not 25).
func (p *Prog) mkdirs(staging, dir string) {
	path := staging
	for _, part := range strings.Split(strings.Trim(dir, "/"), "/") {
		if part == "" {
			continue
		}
		path += "/" + part
		if slices.Contains(p.dirs, path) {
			continue
		}
		p.dirs = append(p.dirs, path)
		p.Call("mkdir "+strings.TrimPrefix(path, staging), syscall.SYS_MKDIRAT, Int(unix.AT_FDCWD), Val(p.Str(path)), Val(0o755))
		p.Allow(syscall.EEXIST)
	}
}

// mountAttr lays out struct mount_attr {u64 attr_set, attr_clr,
// propagation, userns_fd} with attr_set = set.
func (p *Prog) mountAttr(set uint64) uintptr {
	b := make([]byte, unix.MOUNT_ATTR_SIZE_VER0)
	binary.NativeEndian.PutUint64(b, set)
	return p.Buf(b)
}

// addFile writes f below staging: a new file (O_EXCL: never through
// something a bind put there), all of its data or a failed step.
func (p *Prog) addFile(staging string, f File, fd Slot) {
	if !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path || f.Path == "/" {
		p.fail(errors.New("rawchild: root: file " + strconv.Quote(f.Path) + " is not a clean absolute path below /"))
		return
	}
	p.mkdirs(staging, filepath.Dir(f.Path))
	p.CallTo("create "+f.Path, fd, syscall.SYS_OPENAT, Int(unix.AT_FDCWD), Val(p.Str(staging+f.Path)),
		Val(syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW), Val(uintptr(f.Mode)))
	data := append([]byte(nil), f.Data...)
	p.Call("write "+f.Path, syscall.SYS_WRITE, fd.Arg(), Val(p.Buf(data)), Val(uintptr(len(data))))
	p.Expect(uintptr(len(data)))
	p.Call("close "+f.Path, syscall.SYS_CLOSE, fd.Arg())
}

// addDev makes /dev: the nodes bound from the host (nosuid, noexec, but
// devices), the fd links and /dev/shm.
func (p *Prog) addDev(r Root, fd Slot) {
	p.mkdirs(r.Staging, "/dev")
	for _, n := range r.DevNodes {
		if strings.Contains(n, "/") || n == "" || n == "." || n == ".." {
			p.fail(errors.New("rawchild: root: device node " + strconv.Quote(n) + " is not a name in /dev"))
			return
		}
		at := r.Staging + "/dev/" + n
		p.Call("create /dev/"+n, syscall.SYS_MKNODAT, Int(unix.AT_FDCWD), Val(p.Str(at)), Val(syscall.S_IFREG|0o666), Val(0))
		p.Call("bind /dev/"+n, syscall.SYS_MOUNT, Val(p.Str("/dev/"+n)), Val(p.Str(at)), Val(0), Val(syscall.MS_BIND), Val(0))
		p.Call("set the attributes of /dev/"+n, unix.SYS_MOUNT_SETATTR, Int(unix.AT_FDCWD), Val(p.Str(at)), Val(0),
			Val(p.mountAttr(unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)), Val(unix.MOUNT_ATTR_SIZE_VER0))
	}
	for _, l := range [][2]string{{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}} {
		p.Call("symlink /dev/"+l[0], syscall.SYS_SYMLINKAT, Val(p.Str(l[1])), Int(unix.AT_FDCWD), Val(p.Str(r.Staging+"/dev/"+l[0])))
	}
	if r.TmpSize > 0 {
		p.addTmpfs(r.Staging, "/dev/shm", r.TmpSize, r.TmpInodes)
	}
}

// addTmpfs mounts a sticky, world-writable tmpfs of size bytes on dir.
func (p *Prog) addTmpfs(staging, dir string, size, inodes int64) {
	p.mkdirs(staging, dir)
	p.Call("mount "+dir, syscall.SYS_MOUNT, Val(p.Str("tmpfs")), Val(p.Str(staging+dir)), Val(p.Str("tmpfs")),
		Val(syscall.MS_NOSUID|syscall.MS_NODEV), Val(p.Str("mode=1777"+tmpfsSize(size, inodes))))
}

// tmpfsSize is the size and nr_inodes options of a tmpfs ("" for 0).
func tmpfsSize(size, inodes int64) string {
	var o string
	if size > 0 {
		o += ",size=" + strconv.FormatInt(size, 10)
	}
	if inodes > 0 {
		o += ",nr_inodes=" + strconv.FormatInt(inodes, 10)
	}
	return o
}

// addWork makes the workdir: the tree attached, or the tmpfs mounted and
// the copy made entry by entry (each file opened beneath FromFD without
// following any symbolic link, so a link swapped in since the caller
// listed the directory is refused, and sent in one sendfile(2) whose count
// must be the size the caller saw).
func (p *Prog) addWork(staging string, w *Work, tree Slot) {
	if !filepath.IsAbs(w.Dir) || filepath.Clean(w.Dir) != w.Dir {
		p.fail(errors.New("rawchild: root: workdir " + strconv.Quote(w.Dir) + " is not a clean absolute path"))
		return
	}
	at := staging + w.Dir
	p.mkdirs(staging, w.Dir)
	if w.TreeFD > 0 || tree >= 0 {
		from := Val(uintptr(w.TreeFD))
		if tree >= 0 {
			from = tree.Arg()
		}
		p.Call("attach workdir", unix.SYS_MOVE_MOUNT, from, Val(p.Str("")), Int(unix.AT_FDCWD), Val(p.Str(at)),
			Val(unix.MOVE_MOUNT_F_EMPTY_PATH))
		set := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
		if w.ReadOnly {
			set |= unix.MOUNT_ATTR_RDONLY
		}
		p.Call("mount_setattr "+w.Dir, unix.SYS_MOUNT_SETATTR, Int(unix.AT_FDCWD), Val(p.Str(at)), Val(0),
			Val(p.mountAttr(set)), Val(unix.MOUNT_ATTR_SIZE_VER0))
		return
	}
	p.Call("mount workdir tmpfs", syscall.SYS_MOUNT, Val(p.Str("tmpfs")), Val(p.Str(at)), Val(p.Str("tmpfs")),
		Val(syscall.MS_NOSUID|syscall.MS_NODEV), Val(p.Str("mode=0700"+tmpfsSize(w.Size, w.Inodes))))
	if len(w.Copy) == 0 {
		return
	}
	how := make([]byte, unix.SizeofOpenHow) // struct open_how {u64 flags, mode, resolve}
	binary.NativeEndian.PutUint64(how[0:], unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW)
	binary.NativeEndian.PutUint64(how[16:], unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	howAt := p.Buf(how)
	in, out := p.NewSlot(), p.NewSlot()
	for _, e := range w.Copy {
		if e.Name == "" || filepath.IsAbs(e.Name) || filepath.Clean(e.Name) != e.Name || strings.HasPrefix(e.Name, "..") {
			p.fail(errors.New("rawchild: root: workdir entry " + strconv.Quote(e.Name) + " is not a clean relative path"))
			return
		}
		dst := at + "/" + e.Name
		perm := uintptr(e.Mode & 0o777)
		switch e.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			p.Call("copy workdir: mkdir "+e.Name, syscall.SYS_MKDIRAT, Int(unix.AT_FDCWD), Val(p.Str(dst)), Val(perm|0o700))
		case unix.S_IFLNK:
			p.Call("copy workdir: symlink "+e.Name, syscall.SYS_SYMLINKAT, Val(p.Str(e.Link)), Int(unix.AT_FDCWD), Val(p.Str(dst)))
		case unix.S_IFREG:
			if e.Size < 0 || e.Size > maxSendfile {
				p.fail(fmt.Errorf("rawchild: root: workdir file %q of %d bytes is larger than one sendfile", e.Name, e.Size))
				return
			}
			p.CallTo("copy workdir: open "+e.Name, in, unix.SYS_OPENAT2, Val(uintptr(w.FromFD)), Val(p.Str(e.Name)), Val(howAt),
				Val(unix.SizeofOpenHow))
			p.CallTo("copy workdir: create "+e.Name, out, syscall.SYS_OPENAT, Int(unix.AT_FDCWD), Val(p.Str(dst)),
				Val(syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW), Val(perm|0o600))
			if e.Size > 0 {
				p.Call("copy workdir: copy "+e.Name, unix.SYS_SENDFILE, out.Arg(), in.Arg(), Val(0), Val(uintptr(e.Size)))
				p.Expect(uintptr(e.Size))
			}
			p.Call("copy workdir: close "+e.Name, syscall.SYS_CLOSE, in.Arg())
			p.Call("copy workdir: close the copy of "+e.Name, syscall.SYS_CLOSE, out.Arg())
		default:
			p.fail(errors.New("rawchild: root: workdir entry " + strconv.Quote(e.Name) + " is not a directory, file or link"))
			return
		}
	}
}

// addProc mounts the child's proc and covers r.ProcMasked.
func (p *Prog) addProc(r Root, ok Slot) {
	at := r.Staging + "/proc"
	p.mkdirs(r.Staging, "/proc")
	p.Call("mount proc on /proc", syscall.SYS_MOUNT, Val(p.Str("proc")), Val(p.Str(at)), Val(p.Str("proc")),
		Val(syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC|syscall.MS_RDONLY), Val(0))
	for _, m := range r.ProcMasked {
		dst := at + "/" + m
		p.CallTo("mask /proc/"+m, ok, syscall.SYS_MOUNT, Val(p.Str("/dev/null")), Val(p.Str(dst)), Val(0), Val(syscall.MS_BIND), Val(0))
		p.Allow(syscall.ENOENT)
		p.IfOK(ok, func() {
			p.Call("set the attributes of /proc/"+m, unix.SYS_MOUNT_SETATTR, Int(unix.AT_FDCWD), Val(p.Str(dst)), Val(0),
				Val(p.mountAttr(unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)), Val(unix.MOUNT_ATTR_SIZE_VER0))
		})
	}
}
