//go:build linux

package hook

import (
	"syscall"
	"unsafe"
)

// restrictLandlock builds the ruleset the server described (access masks
// already reduced to the kernel's ABI) and enforces it on this thread.
func restrictLandlock(sp *Spec) error {
	attr := [3]uint64{sp.HandledFS, sp.HandledNet, sp.Scoped}
	size := uintptr(8) // ABI 1-3: handled_access_fs only
	switch {
	case sp.LandlockABI >= 6:
		size = 24
	case sp.LandlockABI >= 4:
		size = 16
	}
	rs, _, e := syscall.RawSyscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr[0])), size, 0)
	if e != 0 {
		return wrap("landlock: build ruleset: create", e)
	}
	defer syscall.Close(int(rs))
	for _, r := range sp.Rules {
		fd, err := syscall.Open(r.Path, oPath|syscall.O_CLOEXEC, 0)
		if err != nil {
			if r.Optional && err == syscall.ENOENT {
				continue
			}
			return wrap("landlock: build ruleset: open "+r.Path, err)
		}
		// struct landlock_path_beneath_attr is packed: u64 allowed_access,
		// s32 parent_fd.
		var pb [12]byte
		for i := 0; i < 8; i++ {
			pb[i] = byte(r.Access >> (8 * i))
		}
		for i := 0; i < 4; i++ {
			pb[8+i] = byte(uint32(fd) >> (8 * i))
		}
		const ruleTypePathBeneath = 1
		_, _, e := syscall.RawSyscall6(sysLandlockAddRule, rs, ruleTypePathBeneath, uintptr(unsafe.Pointer(&pb[0])), 0, 0, 0)
		syscall.Close(fd)
		if e != 0 {
			return wrap("landlock: build ruleset: add rule for "+r.Path, e)
		}
	}
	if sp.Egress && sp.HandledNet&accessNetConnectTCP != 0 {
		// struct landlock_net_port_attr: u64 allowed_access, u64 port.
		na := [2]uint64{accessNetConnectTCP, EgressPort}
		const ruleTypeNetPort = 2
		if _, _, e := syscall.RawSyscall6(sysLandlockAddRule, rs, ruleTypeNetPort, uintptr(unsafe.Pointer(&na[0])), 0, 0, 0); e != 0 {
			return wrap("landlock: build ruleset: allow connect to the egress port", e)
		}
	}
	// This thread only, also in an init: a restrict_self per thread would
	// give each its own domain, and with signals scoped a holding init's
	// HoldSignal goroutine, on another thread, could then not kill the
	// program, which is in this thread's. (A shared, all-thread domain
	// needs LANDLOCK_RESTRICT_SELF_TSYNC, newer than this ABI.) The init's
	// other threads run only the runtime (and that goroutine); onThreads
	// takes their capabilities.
	if _, _, e := syscall.RawSyscall(sysLandlockRestrictSelf, rs, 0, 0); e != 0 {
		return wrap("landlock: restrict self", e)
	}
	return nil
}

const oPath = 0x200000 // O_PATH (same on amd64 and arm64)

const accessNetConnectTCP = 1 << 1 // LANDLOCK_ACCESS_NET_CONNECT_TCP
