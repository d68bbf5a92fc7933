// Package seccomp assembles codellm's seccomp-bpf deny list: the last layer
// of the sandbox, which takes away kernel attack surface that the
// namespaces, Landlock and dropped capabilities do not already remove.
//
// [Program] assembles the complete filter (architecture check, terminal
// injection check and go-seccomp-bpf's program for [Policy]) as raw BPF.
// Package sandbox calls it once per process and sends the bytes to the
// helper in the spec; the helper, package hook, installs them with the raw
// seccomp syscall immediately before it execs the user program (it must not
// import go-seccomp-bpf, whose syscall tables are costly to initialise: see
// internal/sandbox/PERF.md). This package's tests run the assembled filter
// in a BPF interpreter; the sandbox's threat tests check the installed
// filter end to end.
//
// The policy is a deny list (default allow) rather than an allow list on
// purpose: codellm runs arbitrary interpreters (python, node, perl, shells)
// whose syscall sets change with every release; an allow list would break
// them in ways no test catches. The list below is the threat model's
// (category C) plus syscalls that only make sense for a system
// administrator.
package seccomp

import "errors"

// ErrUnsupported is returned where seccomp filtering does not exist.
var ErrUnsupported = errors.New("seccomp filtering is not supported on this system")

// Denied lists the syscalls that fail with EPERM inside the sandbox on
// every architecture; [DeniedOn] adds an architecture's own.
var Denied = []string{
	// io_uring bypasses seccomp for the operations it performs.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Kernel programmability and introspection.
	"bpf", "perf_event_open", "userfaultfd",
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
	// Kernel keyrings are not namespaced.
	"keyctl", "add_key", "request_key",
	// Inspecting or writing other processes.
	"ptrace", "process_vm_readv", "process_vm_writev",
	// The mount family and namespace changes.
	"mount", "umount2", "pivot_root", "chroot",
	"open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"unshare", "setns",
	// Host administration.
	"swapon", "swapoff", "reboot", "acct", "quotactl", "vhangup", "syslog",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"open_by_handle_at", "name_to_handle_at",
}

// deniedOnArch are the syscalls only some architectures have, by GOARCH:
// x86's raw port I/O and a.out's uselib. arm64 has no equivalent to deny
// (its ports are memory-mapped, behind the mount and device rules), and
// go-seccomp-bpf refuses a policy that names a syscall the architecture
// lacks, so a name may appear only where it exists.
var deniedOnArch = map[string][]string{
	"amd64": {"iopl", "ioperm", "uselib"},
}

// Arches are the architectures (GOARCH) the sandbox has a policy for.
var Arches = []string{"amd64", "arm64"}

// DeniedOn is the deny list of the architecture goarch (runtime.GOARCH's
// spelling): Denied plus that architecture's own.
func DeniedOn(goarch string) []string {
	return append(Denied[:len(Denied):len(Denied)], deniedOnArch[goarch]...)
}

// SocketFamilies are the address families socket(2) and socketpair(2) may
// use; every other family fails with EAFNOSUPPORT, as if the kernel lacked
// it. What interpreters need: AF_UNIX (local IPC, multiprocessing, asyncio),
// AF_INET and AF_INET6 (loopback, or the network when the operator enables
// one) and AF_NETLINK with protocol NETLINK_ROUTE only (getifaddrs and
// getaddrinfo's AI_ADDRCONFIG; node's os.networkInterfaces). Everything else
// is attack surface with no use in a sandbox: AF_VSOCK ignores network
// namespaces (a block could bind VM-wide ports and reach the hypervisor),
// AF_ALG, AF_PACKET, AF_KEY, AF_BLUETOOTH, AF_CAN, AF_RDS, AF_TIPC, AF_XDP and
// the other netlink protocols (audit, uevent, sock_diag, ...) reach kernel
// code that rarely sees unprivileged callers.
var SocketFamilies = []uint32{1 /* AF_UNIX */, 2 /* AF_INET */, 10 /* AF_INET6 */, 16 /* AF_NETLINK */}

// NetlinkRoute is the only netlink protocol allowed (NETLINK_ROUTE).
const NetlinkRoute = 0

// CloneNamespaceFlags are the clone(2) flags that create namespaces; clone
// with any of them fails with EPERM.
const CloneNamespaceFlags = 0x00020000 | // CLONE_NEWNS
	0x02000000 | // CLONE_NEWCGROUP
	0x04000000 | // CLONE_NEWUTS
	0x08000000 | // CLONE_NEWIPC
	0x10000000 | // CLONE_NEWUSER
	0x20000000 | // CLONE_NEWPID
	0x40000000 | // CLONE_NEWNET
	0x00000080 // CLONE_NEWTIME
