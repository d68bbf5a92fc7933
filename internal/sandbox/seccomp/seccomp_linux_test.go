package seccomp

import (
	"encoding/binary"
	"runtime"
	"slices"
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

// Every name of every architecture's deny list is a syscall of that
// architecture (go-seccomp-bpf refuses the whole policy otherwise, which
// made the sandbox unusable on arm64), and each is denied once.
func TestDenyListResolvesOnEveryArch(t *testing.T) {
	for _, goarch := range Arches {
		info, err := arch.GetInfo(goarch)
		if err != nil {
			t.Fatalf("%s: %v", goarch, err)
		}
		seen := map[string]bool{}
		for _, name := range append(DeniedOn(goarch), "clone", "clone3", "ioctl", "socket", "socketpair") {
			if _, ok := info.SyscallNames[name]; !ok {
				t.Errorf("%s (%s): no syscall %q", goarch, info.Name, name)
			}
			if seen[name] {
				t.Errorf("%s: %q listed twice", goarch, name)
			}
			seen[name] = true
		}
	}
	if got := DeniedOn("arm64"); slices.Contains(got, "iopl") || len(got) != len(Denied) {
		t.Errorf("arm64's deny list %v: want Denied alone (it has no port I/O)", got)
	}
}

func TestDeniedSyscallsGetEPERM(t *testing.T) {
	vm, info := newVM(t)
	for _, name := range DeniedOn(runtime.GOARCH) {
		nr, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("unknown syscall %s", name)
		}
		if got := verdict(t, vm, uint32(info.ID), int32(nr)); got != eperm {
			t.Errorf("%s: verdict %#x, want EPERM", name, got)
		}
	}
	for _, name := range []string{"read", "write", "openat", "execve", "mmap", "futex", "clone", "ioctl"} { // socket: TestSocketFamilies
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

// TestSocketFamilies: socket and socketpair pass for the families
// interpreters use and fail with EAFNOSUPPORT for every other one (AF_VSOCK,
// which ignores network namespaces, first), whatever type flags or garbage
// high bits come with them; netlink is limited to NETLINK_ROUTE.
func TestSocketFamilies(t *testing.T) {
	vm, info := newVM(t)
	eafnosupport := uint32(unix.SECCOMP_RET_ERRNO) | uint32(unix.EAFNOSUPPORT)
	for _, name := range []string{"socket", "socketpair"} {
		nr := int32(info.SyscallNames[name])
		for _, c := range []struct {
			family, typ, proto uint64
		}{
			{unix.AF_UNIX, unix.SOCK_STREAM, 0}, {unix.AF_UNIX, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 0},
			{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_NONBLOCK, 6}, {unix.AF_INET6, unix.SOCK_DGRAM, 17},
			{unix.AF_NETLINK, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE},
			{0xffffffff00000000 | unix.AF_INET, unix.SOCK_STREAM, 0}, // the kernel reads an int
		} {
			if got := verdict(t, vm, uint32(info.ID), nr, c.family, c.typ, c.proto); got != allow {
				t.Errorf("%s(%d, %#x, %d): %#x, want allow", name, c.family, c.typ, c.proto, got)
			}
		}
		for _, c := range []struct {
			family, proto uint64
		}{
			{unix.AF_VSOCK, 0}, {unix.AF_ALG, 0}, {unix.AF_PACKET, 0}, {unix.AF_KEY, 2}, {unix.AF_BLUETOOTH, 0},
			{unix.AF_CAN, 1}, {unix.AF_RDS, 0}, {unix.AF_TIPC, 0}, {unix.AF_XDP, 0}, {unix.AF_X25, 0},
			{unix.AF_APPLETALK, 0}, {unix.AF_NETROM, 0}, {unix.AF_LLC, 0}, {unix.AF_QIPCRTR, 0}, {unix.AF_MCTP, 0},
			{unix.AF_NETLINK, unix.NETLINK_AUDIT}, {unix.AF_NETLINK, unix.NETLINK_KOBJECT_UEVENT},
			{unix.AF_NETLINK, unix.NETLINK_SOCK_DIAG}, {unix.AF_NETLINK, unix.NETLINK_NETFILTER},
			{unix.AF_NETLINK, unix.NETLINK_XFRM}, {unix.AF_NETLINK, unix.NETLINK_GENERIC},
			{0, 0}, {unix.AF_MAX, 0}, {0xffffffff, 0},
		} {
			if got := verdict(t, vm, uint32(info.ID), nr, c.family, unix.SOCK_STREAM, c.proto); got != eafnosupport {
				t.Errorf("%s(%d, proto %d): %#x, want EAFNOSUPPORT", name, c.family, c.proto, got)
			}
		}
	}
	// The check does not leak into other syscalls' arguments.
	if got := verdict(t, vm, uint32(info.ID), int32(info.SyscallNames["connect"]), unix.AF_VSOCK); got != allow {
		t.Errorf("connect(fd 40): %#x, want allow", got)
	}
	if got := verdict(t, vm, uint32(info.ID), int32(info.SyscallNames["bpf"]), unix.AF_UNIX); got != eperm {
		t.Errorf("bpf after the socket check: %#x, want EPERM", got)
	}
}
