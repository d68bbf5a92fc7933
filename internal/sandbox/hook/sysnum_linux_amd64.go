//go:build linux

package hook

import (
	"syscall"
	"unsafe"
)

const sysSeccomp = 317

const sysGetrandom = 318

func fstatat(dirfd int, name string, st *syscall.Stat_t) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	const atSymlinkNofollow = 0x100
	if _, _, e := syscall.Syscall6(syscall.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), atSymlinkNofollow, 0, 0); e != 0 {
		return e
	}
	return nil
}
