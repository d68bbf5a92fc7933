//go:build linux

package hook

import "syscall"

// Why overlays: a read-only bind of /usr still lets a block connect() to a
// host Unix socket below it (the kernel's read-only check skips sockets,
// seccomp cannot see the path and Landlock's path-socket right needs a
// newer ABI than 7). An overlayfs with only lower layers shows the same
// files, but its socket inodes are the overlay's own, not the bound
// socket's, so connect() finds no listener: ECONNREFUSED, while the host's
// original path still connects. Files and exec work as through a bind.
//
// The minimal form is two lower layers: the kernel refuses a single one
// without an upper layer ("overlayfs: at least 2 lowerdir are needed while
// upperdir nonexistent", for host root as well as in a user namespace), and
// refuses the same directory twice ("conflicting lowerdir path"). The
// second layer is one empty directory of the new root shared by every
// overlay: emptyLayer, later covered by /proc, so nothing can appear in it.

// emptyLayer is the overlays' second lower layer, relative to the new root,
// which is the working directory while the root is built. Relative, it
// shows in /proc/self/mountinfo as "lowerdir=/usr:proc", naming nothing of
// the host beyond the directory already shown as the mount point.
const emptyLayer = "proc"

// sysTree puts host directories into the new root read-only: as overlays
// (Spec.Mech has MOverlay) or as recursive binds.
//
// A recursive bind carries the mounts below its source; an overlay shows
// none of them, and the kernel refuses a lower layer with mounts below it
// outright ("overlayfs: failed to clone lowerpath"): in the block's user
// namespace the host's mounts are locked to their parents, and a copy
// without them would reveal what they cover. So a directory with host
// mounts below it is split: it becomes a directory of the root tmpfs and
// each of its entries is mirrored on its own — an entry with no mount
// below it as one overlay (directory) or read-only bind (file), one with
// mounts below split again, symlinks copied, sockets and devices left out.
type sysTree struct {
	overlay bool
	mounts  []string // host mount points below the mirrored directories: Spec.HostMounts, or mountinfo once read
	read    bool     // mounts came from this namespace's /proc/self/mountinfo
	split   int      // entries mirrored one by one so far (at most maxSplit)
	inPlace []string // host directories overlaid in place (overlayInPlace, or Spec.Overlaid)
}

// overlayfsMagic is statfs(2)'s f_type of an overlayfs (OVERLAYFS_SUPER_MAGIC).
const overlayfsMagic = 0x794c7630

// takeOverlaid records the directories the spawner overlaid in place
// (Spec.Overlaid), which are then bound like /etc's entries after
// overlayInPlace. Each must be an overlay in this namespace: binding a
// plain host directory instead would leave its host sockets connectable,
// so a spec that claims otherwise fails the overlay mechanism.
func (t *sysTree) takeOverlaid(dirs []string) error {
	for _, d := range dirs {
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(d, &sfs); err != nil {
			return errOverlay{wrap("build root filesystem: statfs "+d, err)}
		}
		// A host whose root filesystem is an overlay (a container) passes
		// the type check with plain directories, so the directory must also
		// be a mount point: its device differs from its parent's.
		var own, up syscall.Stat_t
		if uint32(sfs.Type) != overlayfsMagic || syscall.Stat(d, &own) != nil || syscall.Stat(parentDir(d), &up) != nil || own.Dev == up.Dev {
			return errOverlay{&herr{"build root filesystem: " + d + " was to be overlaid in place by the spawner but is not an overlay mount", nil}}
		}
		t.inPlace = append(t.inPlace, d)
	}
	return nil
}

// maxSplit bounds the entries a block's root mirrors one by one (each
// costs a mount and a root-tmpfs inode): a host that mounts files into a
// large directory (driver libraries into /usr/lib/…) fails the overlay
// mechanism instead, so native mode refuses and besteffort binds.
const maxSplit = 1024

// errOverlay marks a failure of the overlay mechanism (not of the root as
// a whole), so the server can fall back to binds or refuse (MOverlay).
type errOverlay struct{ error }

// rootFailure is the mechanism a setupRoot error is reported under.
func rootFailure(err error) uint32 {
	if _, ok := err.(errOverlay); ok {
		return MOverlay
	}
	return MRootFS
}

// dir makes host directory src appear read-only, nosuid and nodev at dst,
// an empty directory of the new root.
func (t *sysTree) dir(src, dst string) error {
	if !t.overlay || t.overlaid(src) {
		return bindRO(src, dst)
	}
	below, err := t.retryBelow(src, func() error { return mountOverlay(src, dst) })
	if !below {
		return err
	}
	// Whatever fails while splitting (the root tmpfs full, say) is the
	// overlay mechanism's failure: without it the directory is bound.
	if err := t.splitDir(src, dst); err != nil {
		if _, ok := err.(errOverlay); !ok {
			return errOverlay{err}
		}
		return err
	}
	return nil
}

// overlayInPlace mounts an overlay of host directory src on src itself, in
// the helper's mount namespace (part of the old root: it goes when the old
// root is detached), so that the entries of src mirrored afterwards are
// bound from the overlay. One overlay then serves every /etc entry instead
// of one each: a block's end waits for an RCU grace period per overlay
// (overlayfs releases its layers with kern_unmount_array), measured at
// about 1 ms each on a loaded 2-core host. With host mounts below src the
// entries get their own overlays instead.
func (t *sysTree) overlayInPlace(src string) error {
	var st syscall.Stat_t
	if !t.overlay || t.overlaid(src) || syscall.Lstat(src, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil
	}
	below, err := t.retryBelow(src, func() error { return mountOverlay(src, src) })
	if below || err != nil {
		return err
	}
	t.inPlace = append(t.inPlace, src)
	return nil
}

// retryBelow runs mount unless a host mount lies below src (below true).
// The server's list (Spec.HostMounts) can predate a mount made since; when
// mount fails, this namespace's own /proc/self/mountinfo decides once more.
func (t *sysTree) retryBelow(src string, mount func() error) (below bool, err error) {
	if t.hasBelow(src) {
		return true, nil
	}
	if err = mount(); err == nil || t.read {
		return false, err
	}
	m, rerr := mountPoints()
	if rerr != nil {
		return false, errOverlay{wrap("build root filesystem: read /proc/self/mountinfo", rerr)}
	}
	t.mounts, t.read = m, true
	if t.hasBelow(src) {
		return true, nil
	}
	return false, err
}

// overlaid reports whether src is a directory overlaid in place or below one.
func (t *sysTree) overlaid(src string) bool {
	for _, d := range t.inPlace {
		if src == d || isBelow(src, d) {
			return true
		}
	}
	return false
}

// hasBelow reports whether a host mount lies below directory src.
func (t *sysTree) hasBelow(src string) bool {
	for _, mp := range t.mounts {
		if isBelow(mp, src) {
			return true
		}
	}
	return false
}

// isBelow reports whether path p lies strictly below directory d.
// parentDir is the parent of absolute path p ("/" for a top-level entry).
func parentDir(p string) string {
	for i := len(p) - 1; i > 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "/"
}

func isBelow(p, d string) bool {
	return len(p) > len(d) && p[:len(d)] == d && p[len(d)] == '/'
}

// splitDir mirrors the entries of src, which has host mounts below it, one by one into dst.
func (t *sysTree) splitDir(src, dst string) error {
	fd, err := syscall.Open(src, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return wrap("build root filesystem: open "+src, err)
	}
	names, err := readDirNames(fd)
	syscall.Close(fd)
	if err != nil {
		return wrap("build root filesystem: list "+src, err)
	}
	if t.split += len(names); t.split > maxSplit {
		return errOverlay{&herr{"build root filesystem: host mounts below " + src + " leave more than " + itoa(maxSplit) + " entries to mirror one by one", nil}}
	}
	for _, n := range names {
		if err := t.mirror(src+"/"+n, dst+"/"+n, false); err != nil {
			return err
		}
	}
	return nil
}

// mountOverlay mounts a read-only, nosuid, nodev overlay of lower directory
// src (a path, or /proc/self/fd/N) and emptyLayer on dst; noexec too when
// src's own mount is.
func mountOverlay(src, dst string) error {
	flags := uintptr(syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV)
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(src, &sfs); err != nil {
		return wrap("build root filesystem: statfs "+src, err)
	}
	if sfs.Flags&stNoexec != 0 {
		flags |= syscall.MS_NOEXEC
	}
	if err := syscall.Mount("overlay", dst, "overlay", flags, "lowerdir="+escapeLayer(src)+":"+emptyLayer); err != nil {
		return errOverlay{wrap("build root filesystem: mount a read-only overlay of "+src, err)}
	}
	return nil
}

// probeSocket runs in the trial spawn only: the server listens on name in
// the workdir (open at dirFD), and a socket of an overlay's lower layer must refuse
// connect() through the overlay while its own path (the control) connects.
// The mechanism's whole point, checked on this kernel rather than assumed.
func probeSocket(r, name string, dirFD int) error {
	dst := r + "/.probe"
	if err := mkdir(dst, 0o755); err != nil {
		return err
	}
	lower := "/proc/self/fd/" + itoa(int64(dirFD))
	if err := mountOverlay(lower, dst); err != nil {
		return err
	}
	connect := func(path string) error {
		s, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(s)
		return syscall.Connect(s, &syscall.SockaddrUnix{Name: path})
	}
	if err := connect(lower + "/" + name); err != nil {
		return errOverlay{wrap("build root filesystem: probe: the server's socket does not answer by its own path", err)}
	}
	switch err := connect(dst + "/" + name); err {
	case syscall.ECONNREFUSED:
		return nil
	case nil:
		return errOverlay{&herr{"build root filesystem: this kernel lets connect() through a read-only overlay reach a socket of its lower layer", nil}}
	default:
		return errOverlay{wrap("build root filesystem: probe connect through a read-only overlay", err)}
	}
}

// escapeLayer escapes the characters overlayfs's option parser splits on
// (',' between options, ':' between layers) and its escape character.
func escapeLayer(p string) string {
	b := make([]byte, 0, len(p))
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == ',' || c == ':' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, p[i])
	}
	return string(b)
}

// mountPoints lists the mount points of this mount namespace in
// /proc/self/mountinfo order (parents before the mounts on top of them).
func mountPoints() ([]string, error) {
	fd, err := syscall.Open("/proc/self/mountinfo", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	raw, err := readAll(fd, 16<<20)
	if err != nil {
		return nil, err
	}
	return ParseMountPoints(raw), nil
}

// ParseMountPoints returns the mount point field of each line of a
// mountinfo file, unescaped, in order (package sandbox reads the server's).
func ParseMountPoints(raw []byte) []string {
	var out []string
	for len(raw) > 0 {
		line := raw
		if i := indexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		// id parent major:minor root mount-point options ...
		f := line
		for range 4 {
			if i := indexByte(f, ' '); i >= 0 {
				f = f[i+1:]
			} else {
				f = nil
			}
		}
		if i := indexByte(f, ' '); i >= 0 {
			out = append(out, unescapeMount(f[:i]))
		}
	}
	return out
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// UnescapeMount undoes mountinfo's octal escapes (\040 for a space, \011
// tab, \012 newline, \134 backslash) in one field of a mountinfo line: the
// one decoder of the tree (the runner's sweep, the cgroup probe and the test
// helpers use it too).
func UnescapeMount(s string) string { return unescapeMount([]byte(s)) }

func unescapeMount(b []byte) string {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) && isOct(b[i+1]) && isOct(b[i+2]) && isOct(b[i+3]) {
			out = append(out, (b[i+1]-'0')<<6|(b[i+2]-'0')<<3|(b[i+3]-'0'))
			i += 3
			continue
		}
		out = append(out, b[i])
	}
	return string(out)
}

func isOct(c byte) bool { return c >= '0' && c <= '7' }
