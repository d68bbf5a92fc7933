//go:build linux

package seccomp

import (
	"fmt"
	"runtime"

	bpfseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Supported reports whether the kernel accepts seccomp filters.
func Supported() bool { return bpfseccomp.Supported() }

func errnoAction(e unix.Errno) bpfseccomp.Action {
	return bpfseccomp.ActionErrno | bpfseccomp.Action(e)
}

// Policy returns the library policy for the deny list of this process's
// architecture: everything in DeniedOn gets EPERM, clone with namespace
// flags gets EPERM and clone3 gets ENOSYS (its flags live in memory the
// filter cannot read, so it must look absent and libc falls back to clone,
// whose flags the filter can check).
func Policy() bpfseccomp.Policy {
	return bpfseccomp.Policy{
		DefaultAction: bpfseccomp.ActionAllow,
		Syscalls: []bpfseccomp.SyscallGroup{
			{Names: DeniedOn(runtime.GOARCH), Action: errnoAction(unix.EPERM)},
			{Names: []string{"clone3"}, Action: errnoAction(unix.ENOSYS)},
			{NamesWithCondtions: []bpfseccomp.NameWithConditions{{
				Name: "clone",
				Conditions: bpfseccomp.ArgumentConditions{{
					Argument: 0, Operation: bpfseccomp.BitsSet, Value: CloneNamespaceFlags,
				}},
			}}, Action: errnoAction(unix.EPERM)},
		},
	}
}

// Program assembles the complete filter:
//
//  1. an architecture check that kills the process for any syscall made
//     through a non-native ABI (i386 int 0x80 on x86-64, say) — the library
//     on its own would apply the default action (allow) to those;
//  2. the terminal-injection check: ioctl TIOCSTI/TIOCLINUX fail with EPERM,
//     comparing only the low 32 bits of the command because the kernel
//     truncates it to an unsigned int (a garbage high half must not bypass
//     the check);
//  3. the socket family allow-list: socket and socketpair with a family not
//     in SocketFamilies (or AF_NETLINK with a protocol other than
//     NETLINK_ROUTE) fail with EAFNOSUPPORT;
//  4. the library's program (x32 rejection + the deny list).
func Program() ([]bpf.RawInstruction, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("%w: architecture %s", ErrUnsupported, runtime.GOARCH)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	pol := Policy()
	body, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble policy: %w", err)
	}
	ioctlNr := uint32(info.SyscallNames["ioctl"])
	eperm := uint32(errnoAction(unix.EPERM))
	const argLo1 = 16 + 8*1 // seccomp_data.args[1], low half on little-endian
	prefix := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4},                                  // arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1}, // native?
		bpf.RetConstant{Val: uint32(unix.SECCOMP_RET_KILL_PROCESS)},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ioctlNr, SkipTrue: 4},
		bpf.LoadAbsolute{Off: argLo1, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCSTI, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.TIOCLINUX, SkipTrue: 1},
		bpf.RetConstant{Val: eperm},
	}
	prefix = append(prefix, socketCheck(info)...)
	raw, err := bpf.Assemble(append(prefix, body...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble BPF: %w", err)
	}
	return raw, nil
}

// socketCheck is the socket family allow-list (step 3 of Program). It
// compares the low 32 bits of the family and protocol arguments, which the
// kernel reads as ints.
func socketCheck(info *arch.Info) []bpf.Instruction {
	const argLo0, argLo2 = 16, 16 + 8*2
	n := uint8(len(SocketFamilies))
	// Layout: nr checks (3), family load (1), n-1 "allow" jumps, the netlink
	// jump, protocol load and check (3), deny, allow; then the library body.
	out := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.SyscallNames["socket"]), SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(info.SyscallNames["socketpair"]), SkipTrue: n + 5},
		bpf.LoadAbsolute{Off: argLo0, Size: 4},
	}
	others := []uint32{}
	for _, f := range SocketFamilies {
		if f != unix.AF_NETLINK {
			others = append(others, f)
		}
	}
	for i, f := range others {
		// Jump to "allow": past the remaining family jumps, the netlink
		// block (3) and deny (1).
		out = append(out, bpf.JumpIf{Cond: bpf.JumpEqual, Val: f, SkipTrue: uint8(len(others)-i-1) + 4})
	}
	out = append(out,
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.AF_NETLINK, SkipTrue: 2},
		bpf.LoadAbsolute{Off: argLo2, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: NetlinkRoute, SkipTrue: 1},
		bpf.RetConstant{Val: uint32(errnoAction(unix.EAFNOSUPPORT))},
		bpf.RetConstant{Val: uint32(unix.SECCOMP_RET_ALLOW)},
	)
	return out
}
