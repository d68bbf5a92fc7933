//go:build linux && (amd64 || arm64)

package rawchild

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Lockdown is the per-process confinement a helper applies last, in the
// order package hook's lockDown does: rlimits, no_new_privs, Landlock, no
// capabilities, seccomp. The child is single-threaded, so, unlike the Go
// helper's init, it needs no all-thread capset and no seccomp TSYNC.
type Lockdown struct {
	Rlimits    []Rlimit
	NoNewPrivs bool
	Landlock   *Landlock
	// DropCaps empties the bounding set (0..CapLastCap), the ambient set
	// and the effective, permitted and inheritable sets.
	DropCaps   bool
	CapLastCap int
	// Seccomp is a classic-BPF program: struct sock_filter entries of 8
	// bytes in native byte order (what package sandbox hands package hook).
	Seccomp []byte
}

// Landlock is a ruleset as package hook's Spec describes it: access masks
// already reduced to the kernel's ABI, paths as the child sees them.
type Landlock struct {
	ABI                           int
	HandledFS, HandledNet, Scoped uint64
	Rules                         []LandlockRule
	// ConnectTCP are the TCP ports connect(2) may reach (with HandledNet's
	// connect right: every other port is denied).
	ConnectTCP []uint16
}

// LandlockRule grants Access beneath Path; an Optional path that does not
// exist is skipped.
type LandlockRule struct {
	Path     string
	Access   uint64
	Optional bool
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
	if l.Landlock != nil {
		p.addLandlock(l.Landlock)
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
		p.Call(capDropWhat(c), syscall.SYS_PRCTL, Val(unix.PR_CAPBSET_DROP), Val(uintptr(c)))
		p.Allow(syscall.EINVAL) // above the kernel's last capability
	}
	p.Call("clear ambient capabilities", syscall.SYS_PRCTL, Val(unix.PR_CAP_AMBIENT), Val(unix.PR_CAP_AMBIENT_CLEAR_ALL), Val(0), Val(0), Val(0))
	hdr := make([]byte, 8) // struct __user_cap_header_struct {u32 version; int pid}
	binary.NativeEndian.PutUint32(hdr, unix.LINUX_CAPABILITY_VERSION_3)
	data := make([]byte, 24) // two struct __user_cap_data_struct, all zero
	p.Call("capset", syscall.SYS_CAPSET, Val(p.Buf(hdr)), Val(p.Buf(data)))
}

// capDropNames are the bounding-set drops' descriptions, made once: a
// spawner compiles 64 of them per block.
var capDropNames = func() (n [64]string) {
	for c := range n {
		n[c] = "drop bounding capability " + strconv.Itoa(c)
	}
	return n
}()

func capDropWhat(c int) string {
	if c >= 0 && c < len(capDropNames) {
		return capDropNames[c]
	}
	return "drop bounding capability " + strconv.Itoa(c)
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

// landlockRuleNetPort is LANDLOCK_RULE_NET_PORT (x/sys/unix names only the
// path rule).
const landlockRuleNetPort = 2

// addLandlock builds the ruleset and restricts the child with it. Each
// rule's O_PATH descriptor goes into its struct landlock_path_beneath_attr
// (packed: u64 allowed_access, s32 parent_fd) by a store step, and is
// closed once the rule is added; one slot serves every rule.
func (p *Prog) addLandlock(l *Landlock) {
	attr := make([]byte, 24)
	binary.NativeEndian.PutUint64(attr[0:], l.HandledFS)
	binary.NativeEndian.PutUint64(attr[8:], l.HandledNet)
	binary.NativeEndian.PutUint64(attr[16:], l.Scoped)
	size := uintptr(8) // ABI 1-3: handled_access_fs only
	switch {
	case l.ABI >= 6:
		size = 24
	case l.ABI >= 4:
		size = 16
	}
	rs := p.CallSave("landlock: build ruleset: create", unix.SYS_LANDLOCK_CREATE_RULESET, Val(p.Buf(attr)), Val(size), Val(0))
	fd := p.NewSlot()
	for _, r := range l.Rules {
		pb, at := p.Bytes(12)
		binary.NativeEndian.PutUint64(pb, r.Access)
		p.CallTo("landlock: build ruleset: open "+r.Path, fd, syscall.SYS_OPENAT, Int(unix.AT_FDCWD), Val(p.Str(r.Path)),
			Val(unix.O_PATH|unix.O_CLOEXEC), Val(0))
		rule := func() {
			p.Store32("landlock: the descriptor of "+r.Path, pb, 8, fd)
			p.Call("landlock: build ruleset: add rule for "+r.Path, unix.SYS_LANDLOCK_ADD_RULE, rs.Arg(),
				Val(unix.LANDLOCK_RULE_PATH_BENEATH), Val(at), Val(0))
			p.Call("landlock: close "+r.Path, syscall.SYS_CLOSE, fd.Arg())
		}
		if r.Optional {
			p.Allow(syscall.ENOENT)
			p.IfOK(fd, rule)
		} else {
			rule()
		}
	}
	for _, port := range l.ConnectTCP {
		na := make([]byte, 16) // struct landlock_net_port_attr {u64 allowed_access; u64 port}
		binary.NativeEndian.PutUint64(na[0:], unix.LANDLOCK_ACCESS_NET_CONNECT_TCP)
		binary.NativeEndian.PutUint64(na[8:], uint64(port))
		p.Call("landlock: build ruleset: allow connect to port "+strconv.Itoa(int(port)), unix.SYS_LANDLOCK_ADD_RULE, rs.Arg(),
			Val(landlockRuleNetPort), Val(p.Buf(na)), Val(0))
	}
	p.Call("landlock: restrict self", unix.SYS_LANDLOCK_RESTRICT_SELF, rs.Arg(), Val(0))
	p.Call("landlock: close the ruleset", syscall.SYS_CLOSE, rs.Arg())
}
