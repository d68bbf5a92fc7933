//go:build linux

package hook

import (
	"syscall"
	"unsafe"
)

// ErrWorkdirTooLargeText is the reason given when the workdir does not fit
// in its private tmpfs (the server names the tmp-size limit to raise).
const ErrWorkdirTooLargeText = "workdir does not fit in the private tmpfs"

// setupRoot builds the block's root (see package mount for what is in it)
// and pivots into it; on return the root is the new tmpfs (read-only) and
// the working directory is "/". It runs in a private mount namespace with
// CAP_SYS_ADMIN there, in the PID namespace whose /proc it should show.
// The order is the policy: the host trees first (taken before the staging
// root can cover their paths), then the host's read-only parts, then the
// block's private filesystems, then the switch.
func setupRoot(sp *Spec) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return wrap("build root filesystem: make / private", err)
	}
	tr, err := takeTrees(sp)
	defer tr.close()
	if err != nil {
		return err
	}
	if err := buildStaging(sp, tr); err != nil {
		return err
	}
	if err := setupWorkdir(sp.Staging, sp, tr.dir); err != nil {
		return err
	}
	return pivot(sp.Staging)
}

// buildStaging builds everything of the root but the workdir at
// sp.Staging: the host's read-only parts, the shared dir, /dev, /proc and
// /tmp.
func buildStaging(sp *Spec, tr *trees) error {
	// Before the staging root covers their paths (the shared dir may be below it).
	st := &sysTree{overlay: sp.Mech&MOverlay != 0, mounts: sp.HostMounts}
	if st.overlay {
		if err := st.takeOverlaid(sp.Overlaid); err != nil {
			return err
		}
	}
	r := sp.Staging
	if err := mountStaging(r); err != nil {
		return err
	}
	if st.overlay && sp.ProbeSocket != "" {
		if err := probeSocket(r, sp.ProbeSocket, tr.probe); err != nil {
			return err
		}
	}
	if err := hostParts(r, sp, st); err != nil {
		return err
	}
	if err := setupShared(r, st, tr.shared, sp.Shared); err != nil {
		return err
	}
	if err := setupDev(r, sp); err != nil {
		return err
	}
	if err := setupProc(r); err != nil {
		return err
	}
	if err := mkdir(r+"/tmp", 0o1777); err != nil {
		return err
	}
	return wrap("build root filesystem: mount /tmp", mountTmpfs(r+"/tmp", sp.TmpSize, "1777"))
}

// trees are the host directories opened before the staging root covers
// their paths (they may live under /tmp): the workdir and the shared dir.
type trees struct {
	dir, shared int // descriptors; dir may be DirFD (not ours to close), shared -1 for none
	probe       int // the workdir again, opened in this namespace (Spec.ProbeSocket only; else -1)
	own         []int
}

func (t *trees) close() {
	for _, fd := range t.own {
		syscall.Close(fd)
	}
}

func takeTrees(sp *Spec) (*trees, error) {
	t := &trees{dir: DirFD, shared: -1, probe: -1}
	if sp.ProbeSocket != "" && sp.Mech&MOverlay != 0 {
		// DirFD belongs to the server's mount namespace, which overlayfs refuses as a layer.
		fd, err := syscall.Open(sp.HostDir, oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return t, errOverlay{wrap("build root filesystem: probe: open "+sp.HostDir, err)}
		}
		t.own = append(t.own, fd)
		t.probe = fd
	}
	if sp.Persist && !sp.DirIsTree {
		// A detached copy of the workdir mount, by path. The server is
		// unprivileged in this case, so our uid (its uid) can traverse the
		// workdir's parents.
		fd, err := openTree(sp.HostDir)
		if err != nil {
			return t, wrap("build root filesystem: open_tree workdir", err)
		}
		t.own = append(t.own, fd)
		t.dir = fd
	}
	if sp.Shared != "" {
		var fd int
		var err error
		if sp.Mech&MOverlay != 0 {
			// The overlay's lower layer, named /proc/self/fd/N.
			fd, err = syscall.Open(sp.Shared, oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		} else {
			fd, err = openTree(sp.Shared)
		}
		if err != nil {
			return t, wrap("build root filesystem: open "+sp.Shared, err)
		}
		t.own = append(t.own, fd)
		t.shared = fd
	}
	return t, nil
}

// mountStaging mounts the new root's tmpfs on r and makes it the working
// directory (the overlays name emptyLayer relative to it), with emptyLayer
// made first.
func mountStaging(r string) error {
	if err := syscall.Mount("tmpfs", r, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m,nr_inodes=4096,mode=0755"); err != nil {
		return wrap("build root filesystem: mount root tmpfs on "+r, err)
	}
	if err := syscall.Chdir(r); err != nil {
		return wrap("build root filesystem: chdir "+r, err)
	}
	return mkdir(r+"/"+emptyLayer, 0o555)
}

// hostParts mirrors the system directories and /etc entries and writes the
// generated /etc files (and the deterministic faketimerc).
func hostParts(r string, sp *Spec, st *sysTree) error {
	for _, d := range sp.SystemDirs {
		if err := st.mirror(d, r+d, true); err != nil {
			return err
		}
	}
	if err := mkdir(r+"/etc", 0o755); err != nil {
		return err
	}
	if err := st.overlayInPlace("/etc"); err != nil {
		return err
	}
	for _, e := range sp.EtcEntries {
		if err := st.mirror("/etc/"+e, r+"/etc/"+e, false); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"passwd", sp.Passwd}, {"group", sp.Group}, {"hosts", sp.Hosts}, {"hostname", sp.Hostname}} {
		if err := writeFile(r+"/etc/"+f.name, f.data, 0o644); err != nil {
			return wrap("build root filesystem: write /etc/"+f.name, err)
		}
	}
	return writeFakeTimeRC(r, sp)
}

// setupProc mounts the block's /proc and masks its host files. r/proc is
// emptyLayer, so this comes after the last overlay: the name would resolve
// to the procfs from now on (which overlayfs refuses as a layer).
func setupProc(r string) error {
	if err := syscall.Mount("proc", r+"/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC|syscall.MS_RDONLY, ""); err != nil {
		return wrap("build root filesystem: mount /proc", err)
	}
	return maskProc(r + "/proc")
}

// setupShared puts the shared tree (fd from takeTrees, opened from host
// path shared; -1: none) at SharedMount.
func setupShared(r string, st *sysTree, fd int, shared string) error {
	if fd < 0 {
		return nil
	}
	dst := r + SharedMount
	if st.overlay {
		if err := mkdir(dst, 0o755); err != nil {
			return err
		}
		layer := "/proc/self/fd/" + itoa(int64(fd))
		if st.overlaid(shared) {
			// fd is the root of the spawner's overlay of it already.
			if err := bindRO(layer, dst); err != nil {
				return err
			}
		} else if err := mountOverlay(layer, dst); err != nil {
			return err
		}
	} else if err := attachRO(fd, dst); err != nil {
		return err
	}
	// ESM ignores NODE_PATH and walks up from the script to /node_modules: point that at the shared
	// node modules, so `import … from 'fleetkit'` resolves like require() does.
	return wrap("build root filesystem: symlink /node_modules", syscall.Symlink(SharedMount+"/node", r+"/node_modules"))
}

// pivot makes the root read-only (nothing outside the workdir, /tmp and
// /dev/shm is writable) and switches to it.
func pivot(r string) error {
	if err := remountRootRO(r); err != nil {
		return err
	}
	return switchRoot(r)
}

func remountRootRO(r string) error {
	return wrap("build root filesystem: remount root read-only",
		syscall.Mount("", r, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""))
}

// switchRoot makes the root mounted on r the process's root and detaches
// the old one.
func switchRoot(r string) error {
	if err := syscall.Chdir(r); err != nil {
		return wrap("build root filesystem: chdir "+r, err)
	}
	// pivot_root(".", ".") stacks the old root under the new one at "/";
	// detaching it leaves only the new root, without needing a directory
	// for the old root inside the (read-only) new one.
	if err := syscall.PivotRoot(".", "."); err != nil {
		return wrap("build root filesystem: pivot_root", err)
	}
	if err := syscall.Unmount(".", syscall.MNT_DETACH); err != nil {
		return wrap("build root filesystem: detach old root", err)
	}
	return wrap("build root filesystem: chdir /", syscall.Chdir("/"))
}

// ProcMasked are the files of a fresh /proc that describe the host rather than the run: the kernel
// command line (boot parameters, sometimes secrets), the host's boot id (a stable host identifier
// that correlates runs), and the global timer and scheduler dumps (host task names and pids). Each is
// covered with /dev/null (reads are empty, writes discarded); a file the kernel lacks is skipped.
var ProcMasked = []string{"cmdline", "sys/kernel/random/boot_id", "timer_list", "sched_debug"}

func maskProc(proc string) error {
	for _, p := range ProcMasked {
		dst := proc + "/" + p
		if err := syscall.Mount("/dev/null", dst, "", syscall.MS_BIND, ""); err != nil {
			if err == syscall.ENOENT {
				continue
			}
			return wrap("build root filesystem: mask /proc/"+p, err)
		}
		if err := restrict(dst, mountAttrRdonly|mountAttrNosuid|mountAttrNoexec); err != nil {
			return err
		}
	}
	return nil
}

func mkdir(path string, mode uint32) error {
	return wrap("build root filesystem: mkdir "+path, syscall.Mkdir(path, mode))
}

func writeFile(path string, data []byte, mode uint32) error {
	fd, err := syscall.Open(path, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return writeAll(fd, data)
}

func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := syscall.Write(fd, data)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func mountTmpfs(target string, size int64, mode string) error {
	return syscall.Mount("tmpfs", target, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV,
		"size="+itoa(size)+",nr_inodes="+itoa(TmpfsInodes(size))+",mode="+mode)
}

// TmpfsInodes is the inode cap of a private tmpfs of size bytes: one inode per 4 KiB, at least 4096.
// Without it a block could create files by the hundred thousand (empty files cost no size, only
// kernel memory), bounded only by the memory cgroup.
func TmpfsInodes(size int64) int64 {
	return max(size/4096, 4096)
}

// mirror recreates host path src at dst: symlinks as symlinks, directories
// through t (overlays or binds), files as read-only bind mounts; anything
// else (a socket, a device) is left out. A missing src is skipped.
func (t *sysTree) mirror(src, dst string, dirsOnly bool) error {
	var st syscall.Stat_t
	if err := syscall.Lstat(src, &st); err != nil {
		if err == syscall.ENOENT {
			return nil
		}
		return wrap("build root filesystem: stat "+src, err)
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFLNK:
		target, err := readlinkat(-100, src) // AT_FDCWD
		if err != nil {
			return wrap("build root filesystem: readlink "+src, err)
		}
		return wrap("build root filesystem: symlink "+dst, syscall.Symlink(target, dst))
	case syscall.S_IFDIR:
		if err := mkdir(dst, 0o755); err != nil {
			return err
		}
		return t.dir(src, dst)
	case syscall.S_IFREG:
		if dirsOnly {
			return nil
		}
		if err := writeFile(dst, nil, 0o644); err != nil {
			return wrap("build root filesystem: create "+dst, err)
		}
	default:
		return nil
	}
	return bindRO(src, dst)
}

// bindRO bind-mounts src on dst and remounts it read-only and nosuid,
// keeping the flags the kernel locks on mounts inherited from a more
// privileged namespace (dropping a locked flag would fail with EPERM).
func bindRO(src, dst string) error {
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return wrap("build root filesystem: bind "+src, err)
	}
	return restrict(dst, mountAttrRdonly|mountAttrNosuid|mountAttrNodev)
}

// mount_setattr(2) attributes (MOUNT_ATTR_*).
const (
	mountAttrRdonly = 0x1
	mountAttrNosuid = 0x2
	mountAttrNodev  = 0x4
	mountAttrNoexec = 0x8
)

// noMountSetattr records that mount_setattr returned ENOSYS (kernel before
// 5.12, or a seccomp profile that does not know it), so later mounts go
// straight to the statfs + remount path.
var noMountSetattr bool

// restrict adds the MOUNT_ATTR_* flags attr to the mount at dst (that mount
// only, like a bind remount). mount_setattr sets them in one call: it only
// adds flags, so the ones the kernel locks stay as they are without reading
// them first. Without it, remount does the same with statfs + MS_REMOUNT.
func restrict(dst string, attr uint64) error {
	if !noMountSetattr {
		err := mountSetattr(-100 /* AT_FDCWD */, dst, 0, attr)
		if err != syscall.ENOSYS {
			return wrap("build root filesystem: mount_setattr "+dst, err)
		}
		noMountSetattr = true
	}
	var extra uintptr
	for _, m := range [][2]uintptr{
		{mountAttrRdonly, syscall.MS_RDONLY}, {mountAttrNosuid, syscall.MS_NOSUID},
		{mountAttrNodev, syscall.MS_NODEV}, {mountAttrNoexec, syscall.MS_NOEXEC},
	} {
		if uintptr(attr)&m[0] != 0 {
			extra |= m[1]
		}
	}
	return remount(dst, extra)
}

// mountSetattr calls mount_setattr(dirfd, path, flags, &{attr_set: set},
// MOUNT_ATTR_SIZE_VER0); it returns nil or a syscall.Errno.
func mountSetattr(dirfd int, path string, flags uintptr, set uint64) error {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return err
	}
	attr := struct{ set, clr, propagation, usernsFD uint64 }{set: set}
	if _, _, e := syscall.Syscall6(sysMountSetattr, uintptr(dirfd), uintptr(unsafe.Pointer(p)), flags, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0); e != 0 {
		return e
	}
	return nil
}

// statvfs flags (ST_*), which package syscall does not name.
const (
	stRdonly     = 0x1
	stNosuid     = 0x2
	stNodev      = 0x4
	stNoexec     = 0x8
	stNoatime    = 0x400
	stNodiratime = 0x800
	stRelatime   = 0x1000
)

func remount(dst string, extra uintptr) error {
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(dst, &sfs); err != nil {
		return wrap("build root filesystem: statfs "+dst, err)
	}
	flags := uintptr(syscall.MS_REMOUNT|syscall.MS_BIND) | extra
	for _, m := range [][2]uintptr{
		{stRdonly, syscall.MS_RDONLY}, {stNosuid, syscall.MS_NOSUID}, {stNodev, syscall.MS_NODEV},
		{stNoexec, syscall.MS_NOEXEC}, {stNoatime, syscall.MS_NOATIME}, {stNodiratime, syscall.MS_NODIRATIME},
		{stRelatime, syscall.MS_RELATIME},
	} {
		if uintptr(sfs.Flags)&m[0] != 0 {
			flags |= m[1]
		}
	}
	if err := syscall.Mount("", dst, "", flags, ""); err != nil {
		return wrap("build root filesystem: remount "+dst, err)
	}
	return nil
}

func setupDev(r string, sp *Spec) error {
	dev := r + "/dev"
	if err := mkdir(dev, 0o755); err != nil {
		return err
	}
	for _, n := range sp.DevNodes {
		if err := writeFile(dev+"/"+n, nil, 0o666); err != nil {
			return wrap("build root filesystem: create "+dev+"/"+n, err)
		}
		if err := syscall.Mount("/dev/"+n, dev+"/"+n, "", syscall.MS_BIND, ""); err != nil {
			return wrap("build root filesystem: bind /dev/"+n, err)
		}
		if err := restrict(dev+"/"+n, mountAttrNosuid|mountAttrNoexec); err != nil {
			return err
		}
	}
	for _, l := range [][2]string{
		{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
	} {
		if err := syscall.Symlink(l[1], dev+"/"+l[0]); err != nil {
			return wrap("build root filesystem: symlink /dev/"+l[0], err)
		}
	}
	if err := mkdir(dev+"/shm", 0o1777); err != nil {
		return err
	}
	return wrap("build root filesystem: mount /dev/shm", mountTmpfs(dev+"/shm", sp.TmpSize, "1777"))
}

// setupWorkdir makes the workdir appear at sp.Dir inside the new root.
// Parent directories are created 0755 in whichever filesystem holds them
// (the private /tmp when Dir is under /tmp).
func setupWorkdir(r string, sp *Spec, dirFD int) error {
	dst := r + sp.Dir
	if err := mkdirAll(dst); err != nil {
		return wrap("build root filesystem: create workdir mount point", err)
	}
	if sp.Persist {
		const moveMountFEmptyPath = 0x4
		p, err := syscall.BytePtrFromString("")
		if err != nil {
			return err
		}
		d, err := syscall.BytePtrFromString(dst)
		if err != nil {
			return err
		}
		if _, _, e := syscall.Syscall6(sysMoveMount, uintptr(dirFD), uintptr(unsafe.Pointer(p)), ^uintptr(99) /* AT_FDCWD */, uintptr(unsafe.Pointer(d)), moveMountFEmptyPath, 0); e != 0 {
			return wrap("build root filesystem: attach workdir", e)
		}
		attr := uint64(mountAttrNosuid | mountAttrNodev)
		if sp.ReadOnly {
			attr |= mountAttrRdonly
		}
		return restrict(dst, attr)
	}
	if err := mountTmpfs(dst, sp.WorkdirSize(), "0700"); err != nil {
		return wrap("build root filesystem: mount workdir tmpfs", err)
	}
	if err := copyTree(dirFD, dst, 0); err != nil {
		if isENOSPC(err) {
			return &herr{ErrWorkdirTooLargeText + " (" + err.Error() + ")", nil}
		}
		return wrap("build root filesystem: copy workdir", err)
	}
	return nil
}

func isENOSPC(err error) bool {
	for err != nil {
		if err == syscall.ENOSPC {
			return true
		}
		h, ok := err.(*herr)
		if !ok {
			return false
		}
		err = h.err
	}
	return false
}

func mkdirAll(path string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err == nil {
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return nil
		}
		return syscall.ENOTDIR
	}
	i := len(path)
	for i > 0 && path[i-1] == '/' {
		i--
	}
	j := i
	for j > 0 && path[j-1] != '/' {
		j--
	}
	if j > 1 {
		if err := mkdirAll(path[:j-1]); err != nil {
			return err
		}
	}
	if err := syscall.Mkdir(path, 0o755); err != nil && err != syscall.EEXIST {
		return err
	}
	return nil
}

func openTree(path string) (int, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	const openTreeClone = 1
	fd, _, e := syscall.Syscall(sysOpenTree, ^uintptr(99) /* AT_FDCWD */, uintptr(unsafe.Pointer(p)), openTreeClone|syscall.O_CLOEXEC)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func readlinkat(dirfd int, name string) (string, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	n, _, e := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return "", e
	}
	return string(buf[:n]), nil
}

// copyTree copies the directory open at fd into dst: regular files,
// directories and symlinks (as links; they resolve inside the sandbox, so
// a link to a host file shows nothing of the host). Other types are
// skipped.
func copyTree(fd int, dst string, depth int) error {
	if depth > 64 {
		return &herr{"workdir nests deeper than 64 levels", nil}
	}
	names, err := readDirNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st syscall.Stat_t
		if err := fstatat(fd, n, &st); err != nil {
			return wrap("stat "+n, err)
		}
		target := dst + "/" + n
		perm := st.Mode & 0o777
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			if err := copyFile(fd, n, target, perm); err != nil {
				return err
			}
		case syscall.S_IFDIR:
			if err := syscall.Mkdir(target, perm|0o700); err != nil {
				return wrap("mkdir "+target, err)
			}
			sub, err := syscall.Openat(fd, n, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
			if err != nil {
				return wrap("open "+n, err)
			}
			err = copyTree(sub, target, depth+1)
			syscall.Close(sub)
			if err != nil {
				return err
			}
		case syscall.S_IFLNK:
			l, err := readlinkat(fd, n)
			if err != nil {
				return wrap("readlink "+n, err)
			}
			if err := syscall.Symlink(l, target); err != nil {
				return wrap("symlink "+target, err)
			}
		}
	}
	return nil
}

// readDirNames lists the directory open at fd from its start, through a
// duplicate so the caller's offset is left alone for the next reader.
func readDirNames(fd int) ([]string, error) {
	d, err := syscall.Openat(fd, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, wrap("open directory", err)
	}
	defer syscall.Close(d)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.ReadDirent(d, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, wrap("read directory", err)
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
}

func copyFile(dirfd int, name, dst string, perm uint32) error {
	sfd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return wrap("open "+name, err)
	}
	defer syscall.Close(sfd)
	out, err := syscall.Open(dst, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, perm|0o600)
	if err != nil {
		return wrap("create "+dst, err)
	}
	defer syscall.Close(out)
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(sfd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return wrap("copy "+name, err)
		}
		if n == 0 {
			return nil
		}
		if err := writeAll(out, buf[:n]); err != nil {
			return wrap("copy "+dst[1:], err)
		}
	}
}

// attachRO attaches the detached tree fd (open_tree) on a new directory dst, read-only, nosuid and nodev.
func attachRO(fd int, dst string) error {
	if err := mkdir(dst, 0o755); err != nil {
		return err
	}
	empty, _ := syscall.BytePtrFromString("")
	d, err := syscall.BytePtrFromString(dst)
	if err != nil {
		return err
	}
	const moveMountFEmptyPath = 0x4
	if _, _, e := syscall.Syscall6(sysMoveMount, uintptr(fd), uintptr(unsafe.Pointer(empty)), ^uintptr(99) /* AT_FDCWD */, uintptr(unsafe.Pointer(d)), moveMountFEmptyPath, 0); e != 0 {
		return wrap("build root filesystem: attach "+dst, e)
	}
	return restrict(dst, mountAttrRdonly|mountAttrNosuid|mountAttrNodev)
}
