//go:build linux

package rawchild

import (
	"syscall"
	"unsafe"
)

// threadPointer is the calling thread's FS base: the Go runtime's m.tls, or
// the C library's thread control block in a cgo build.
//
//go:nosplit
func threadPointer() uintptr {
	const archGetFS = 0x1003
	var fs uintptr
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archGetFS, uintptr(unsafe.Pointer(&fs)), 0); e != 0 {
		return 0
	}
	return fs
}
