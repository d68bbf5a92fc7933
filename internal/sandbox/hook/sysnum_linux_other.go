//go:build linux && !amd64 && !arm64

package hook

import "syscall"

// sysSeccomp is unknown here: the server only assembles filters for amd64
// and arm64, and an invalid number makes the syscall fail with ENOSYS, so a
// filter that somehow arrived would fail closed.
const sysSeccomp = ^uintptr(0)

const sysGetrandom = 0xffffffff // unknown: deterministic mode is refused with seccomp

// fstatat without the per-architecture syscall number: O_PATH|O_NOFOLLOW
// opens a symlink itself, so fstat describes what lstat would.
func fstatat(dirfd int, name string, st *syscall.Stat_t) error {
	fd, err := syscall.Openat(dirfd, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return syscall.Fstat(fd, st)
}
