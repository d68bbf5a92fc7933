package workspace

import (
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// forcePortableResolver makes newResolver use os.Root even where openat2 works (tests run both resolvers).
var forcePortableResolver bool

// newResolver prefers openat2(RESOLVE_BENEATH): the kernel resolves the whole path beneath the root descriptor
// in one step, so no component can be swapped between a check and its use. Kernels without openat2 (< 5.6)
// get the os.Root resolver.
func newResolver(real string) (resolver, error) {
	if forcePortableResolver {
		return newRootResolver(real)
	}
	fd, err := unix.Open(real, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH}
	probe, err := unix.Openat2(fd, ".", &how)
	if errors.Is(err, unix.ENOSYS) {
		unix.Close(fd)
		return newRootResolver(real)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	unix.Close(probe)
	return &beneathResolver{fd: fd, real: real}, nil
}

type beneathResolver struct {
	fd   int
	real string // realpath of the root, only to re-check where an opened descriptor really is
}

func (r *beneathResolver) close() error { return unix.Close(r.fd) }

func (r *beneathResolver) rootID() (fileID, error) { return fstatFD(r.fd) }

// workDir works because a forked child still holds the parent's descriptors when it changes directory (the
// descriptor is close-on-exec, so it is gone once the program runs).
func (r *beneathResolver) workDir() string { return "/proc/self/fd/" + strconv.Itoa(r.fd) }

// openat2 retries EAGAIN (the kernel's answer to a concurrent rename during RESOLVE_BENEATH resolution) and
// EINTR a bounded number of times.
func (r *beneathResolver) openat2(rel string, how *unix.OpenHow) (int, error) {
	if rel == "" {
		rel = "."
	}
	var err error
	for range 64 {
		var fd int
		fd, err = unix.Openat2(r.fd, rel, how)
		if err == nil {
			return fd, nil
		}
		if err != unix.EAGAIN && err != unix.EINTR {
			return -1, err
		}
	}
	return -1, err
}

func resolveFlags(noSymlinks bool) uint64 {
	res := uint64(unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS)
	if noSymlinks {
		res |= unix.RESOLVE_NO_SYMLINKS
	}
	return res
}

func (r *beneathResolver) openFile(rel string, noSymlinks bool) (*os.File, error) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: resolveFlags(noSymlinks),
	}
	fd, err := r.openat2(rel, &how)
	if err != nil {
		return nil, err
	}
	if err := r.checkBeneath(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), displayPath(rel)), nil
}

// checkBeneath re-checks an opened descriptor's identity in the namespace: its current path, as the kernel
// reports it, must lie beneath the root's realpath. RESOLVE_BENEATH already guarantees this at open time; the
// re-check catches what it cannot see, such as a root that was moved after registration.
func (r *beneathResolver) checkBeneath(fd int) error {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return err
	}
	if p != r.real && !strings.HasPrefix(p, strings.TrimSuffix(r.real, "/")+"/") {
		return unix.EXDEV
	}
	return nil
}

func (r *beneathResolver) stat(rel string) (statInfo, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveFlags(true)}
	fd, err := r.openat2(rel, &how)
	if err != nil {
		return statInfo{}, err
	}
	defer unix.Close(fd)
	return fstatInfo(fd)
}

func (r *beneathResolver) openDir(rel string) (dirHandle, error) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: resolveFlags(true),
	}
	fd, err := r.openat2(rel, &how)
	if err != nil {
		return nil, err
	}
	if err := r.checkBeneath(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &fdDir{fd: fd}, nil
}

func fstatInfo(fd int) (statInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return statInfo{}, err
	}
	return statOf(&st), nil
}

func fstatFD(fd int) (fileID, error) {
	si, err := fstatInfo(fd)
	return si.id, err
}

func statOf(st *unix.Stat_t) statInfo {
	return statInfo{
		id:   fileID{dev: st.Dev, ino: st.Ino},
		mode: modeOf(st.Mode),
		size: st.Size,
		uid:  int(st.Uid),
		gid:  int(st.Gid),
	}
}

// modeOf converts a raw st_mode to an fs.FileMode the way package os does.
func modeOf(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= os.ModeDir
	case unix.S_IFLNK:
		mode |= os.ModeSymlink
	case unix.S_IFIFO:
		mode |= os.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= os.ModeSocket
	case unix.S_IFBLK:
		mode |= os.ModeDevice
	case unix.S_IFCHR:
		mode |= os.ModeDevice | os.ModeCharDevice
	}
	if m&unix.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// fdDir is a directory descriptor opened beneath the root; names are single components.
type fdDir struct{ fd int }

func (d *fdDir) id() (fileID, error) { return fstatFD(d.fd) }
func (d *fdDir) close() error        { return unix.Close(d.fd) }
func (d *fdDir) sync() error         { return unix.Fsync(d.fd) }

func (d *fdDir) lstat(name string) (statInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return statInfo{}, err
	}
	return statOf(&st), nil
}

func (d *fdDir) createExcl(name string) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (d *fdDir) openNoFollow(name string) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (d *fdDir) rename(oldName, newName string) error {
	return unix.Renameat(d.fd, oldName, d.fd, newName)
}

func (d *fdDir) link(oldName, newName string) error {
	return unix.Linkat(d.fd, oldName, d.fd, newName, 0)
}

func (d *fdDir) remove(name string) error { return unix.Unlinkat(d.fd, name, 0) }
