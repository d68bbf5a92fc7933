package seccomp

import (
	"encoding/binary"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// verdict runs the assembled filter in x/net/bpf's interpreter on a
// seccomp_data record (nr, arch, ip, args) and returns the filter's return
// value. The interpreter loads 32-bit words big-endian (packet order) while
// the kernel loads seccomp_data in native order, so each 32-bit word is
// stored big-endian at the offset where the kernel would find it: the
// filter sees exactly the values the kernel would give it.
func verdict(t *testing.T, vm *bpf.VM, archID uint32, nr int32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], archID)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))       // low half (little-endian layout)
		binary.BigEndian.PutUint32(data[16+8*i+4:], uint32(a>>32)) // high half
	}
	v, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(v)
}

func newVM(t *testing.T) (*bpf.VM, *arch.Info) {
	t.Helper()
	raw, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	return vm, info
}

const (
	allow = uint32(unix.SECCOMP_RET_ALLOW)
	eperm = uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EPERM)
	enosy = uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.ENOSYS)
	kill  = uint32(unix.SECCOMP_RET_KILL_PROCESS)
)

func TestDeniedSyscallsGetEPERM(t *testing.T) {
	vm, info := newVM(t)
	for _, name := range Denied {
		nr, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("unknown syscall %s", name)
		}
		if got := verdict(t, vm, uint32(info.ID), int32(nr)); got != eperm {
			t.Errorf("%s: verdict %#x, want EPERM", name, got)
		}
	}
	for _, name := range []string{"read", "write", "openat", "execve", "mmap", "futex", "clone", "socket", "ioctl"} {
		if got := verdict(t, vm, uint32(info.ID), int32(info.SyscallNames[name])); got != allow {
			t.Errorf("%s: verdict %#x, want allow", name, got)
		}
	}
}

func TestClone(t *testing.T) {
	vm, info := newVM(t)
	clone := int32(info.SyscallNames["clone"])
	if got := verdict(t, vm, uint32(info.ID), int32(info.SyscallNames["clone3"])); got != enosy {
		t.Errorf("clone3: %#x, want ENOSYS", got)
	}
	// fork()/pthread_create flags pass.
	for _, fl := range []uint64{uint64(unix.SIGCHLD), unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID} {
		if got := verdict(t, vm, uint32(info.ID), clone, fl); got != allow {
			t.Errorf("clone(%#x): %#x, want allow", fl, got)
		}
	}
	for _, fl := range []uint64{unix.CLONE_NEWUSER, unix.CLONE_NEWNS | uint64(unix.SIGCHLD), unix.CLONE_NEWNET, unix.CLONE_NEWPID, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWCGROUP, unix.CLONE_NEWTIME} {
		if got := verdict(t, vm, uint32(info.ID), clone, fl); got != eperm {
			t.Errorf("clone(%#x): %#x, want EPERM", fl, got)
		}
	}
}

func TestTerminalInjection(t *testing.T) {
	vm, info := newVM(t)
	ioctl := int32(info.SyscallNames["ioctl"])
	for _, cmd := range []uint64{unix.TIOCSTI, unix.TIOCLINUX, 0xffffffff00000000 | unix.TIOCSTI} {
		if got := verdict(t, vm, uint32(info.ID), ioctl, 0, cmd); got != eperm {
			t.Errorf("ioctl(%#x): %#x, want EPERM", cmd, got)
		}
	}
	if got := verdict(t, vm, uint32(info.ID), ioctl, 1, unix.TCGETS); got != allow {
		t.Errorf("ioctl(TCGETS): %#x, want allow", got)
	}
}

func TestForeignArchitectureKilled(t *testing.T) {
	vm, info := newVM(t)
	if got := verdict(t, vm, uint32(arch.I386.ID), 20); got != kill {
		t.Errorf("i386 getpid: %#x, want KILL_PROCESS", got)
	}
	// x32 ABI: native arch, syscall number with the x32 bit.
	if got := verdict(t, vm, uint32(info.ID), int32(0x40000000|39)); got != enosy {
		t.Errorf("x32 getpid: %#x, want ENOSYS", got)
	}
}
