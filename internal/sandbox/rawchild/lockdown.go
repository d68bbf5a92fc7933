//go:build linux && (amd64 || arm64)

package rawchild

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Lockdown is the per-process confinement a helper applies last, in the
// order package hook's lockDown does: rlimits, no_new_privs, no
// capabilities, seccomp. (Landlock goes between no_new_privs and the
// capability drop; its rules need paths and descriptors and are not
// compiled here yet.) The child is single-threaded, so, unlike the Go
// helper's init, it needs no all-thread capset and no seccomp TSYNC.
type Lockdown struct {
	Rlimits    []Rlimit
	NoNewPrivs bool
	// DropCaps empties the bounding set (0..CapLastCap), the ambient set
	// and the effective, permitted and inheritable sets.
	DropCaps   bool
	CapLastCap int
	// Seccomp is a classic-BPF program: struct sock_filter entries of 8
	// bytes in native byte order (what package sandbox hands package hook).
	Seccomp []byte
}

// Rlimit is one resource limit, soft and hard alike.
type Rlimit struct {
	Name     string // for the error message: "NOFILE"
	Resource int
	Value    uint64
}

// AddLockdown appends l's steps to p.
func (p *Prog) AddLockdown(l Lockdown) {
	for _, r := range l.Rlimits {
		lim := make([]byte, 16)
		binary.NativeEndian.PutUint64(lim[0:], r.Value)
		binary.NativeEndian.PutUint64(lim[8:], r.Value)
		p.Call(fmt.Sprintf("setrlimit %s=%d", r.Name, r.Value), unix.SYS_PRLIMIT64,
			Val(0), Val(uintptr(r.Resource)), Val(p.Buf(lim)), Val(0))
	}
	if l.NoNewPrivs {
		p.Call("prctl(PR_SET_NO_NEW_PRIVS)", syscall.SYS_PRCTL, Val(unix.PR_SET_NO_NEW_PRIVS), Val(1), Val(0), Val(0), Val(0))
	}
	if l.DropCaps {
		p.addCapDrop(l.CapLastCap)
	}
	if l.Seccomp != nil {
		p.addSeccomp(l.Seccomp)
	}
}

func (p *Prog) addCapDrop(last int) {
	if last <= 0 {
		last = 63
	}
	for c := 0; c <= last; c++ {
		p.Call(fmt.Sprintf("drop bounding capability %d", c), syscall.SYS_PRCTL, Val(unix.PR_CAPBSET_DROP), Val(uintptr(c)))
		p.Allow(syscall.EINVAL) // above the kernel's last capability
	}
	p.Call("clear ambient capabilities", syscall.SYS_PRCTL, Val(unix.PR_CAP_AMBIENT), Val(unix.PR_CAP_AMBIENT_CLEAR_ALL), Val(0), Val(0), Val(0))
	hdr := make([]byte, 8) // struct __user_cap_header_struct {u32 version; int pid}
	binary.NativeEndian.PutUint32(hdr, unix.LINUX_CAPABILITY_VERSION_3)
	data := make([]byte, 24) // two struct __user_cap_data_struct, all zero
	p.Call("capset", syscall.SYS_CAPSET, Val(p.Buf(hdr)), Val(p.Buf(data)))
}

// addSeccomp loads prog as the last step. The kernel copies the filter at
// the call, so it only has to be in p's memory until then.
func (p *Prog) addSeccomp(prog []byte) {
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog)/8 > 4096 {
		p.fail(errors.New("rawchild: invalid seccomp filter of " + fmt.Sprint(len(prog)) + " bytes"))
		return
	}
	// 8-byte aligned memory for struct sock_filter[]: a []uint64 viewed as
	// bytes, kept alive through that view.
	words := make([]uint64, len(prog)/8)
	filter := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(prog))
	copy(filter, prog)
	// struct sock_fprog {u16 len; (pad); struct sock_filter *filter}
	fprog := make([]byte, 16)
	binary.NativeEndian.PutUint16(fprog[0:], uint16(len(words)))
	binary.NativeEndian.PutUint64(fprog[8:], uint64(p.Buf(filter)))
	const seccompSetModeFilter = 1
	p.Call("seccomp(SECCOMP_SET_MODE_FILTER)", unix.SYS_SECCOMP, Val(seccompSetModeFilter), Val(0), Val(p.Buf(fprog)))
}
