//go:build linux

package sandbox

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/mount"
	"github.com/codellm/codellm/internal/sandbox/seccomp"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// The server computes everything that needs a library or a policy
// decision, once, and the helper (package hook) only performs syscalls;
// see package hook for why.

// seccompProgram is the assembled deny-list filter as the kernel's struct
// sock_filter array in native (little-endian on amd64/arm64) byte order.
var seccompProgram = sync.OnceValues(func() ([]byte, error) {
	raw, err := seccomp.Program()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		b = binary.LittleEndian.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b, nil
})

// capLastCap is the highest capability number of the running kernel.
var capLastCap = sync.OnceValue(func() int64 {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
			return v
		}
	}
	return 63
})

// Landlock access rights handled at each ABI (the kernel rejects a
// ruleset naming a right it does not know).
func landlockHandled(abi int) (fs, net, scoped uint64) {
	fs = llsys.AccessFSExecute | llsys.AccessFSWriteFile | llsys.AccessFSReadFile | llsys.AccessFSReadDir |
		llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile | llsys.AccessFSMakeChar | llsys.AccessFSMakeDir |
		llsys.AccessFSMakeReg | llsys.AccessFSMakeSock | llsys.AccessFSMakeFifo | llsys.AccessFSMakeBlock |
		llsys.AccessFSMakeSym
	if abi >= 2 {
		fs |= llsys.AccessFSRefer
	}
	if abi >= 3 {
		fs |= llsys.AccessFSTruncate
	}
	if abi >= 4 {
		net = llsys.AccessNetBindTCP | llsys.AccessNetConnectTCP
	}
	if abi >= 5 {
		fs |= llsys.AccessFSIoctlDev
	}
	if abi >= 6 {
		scoped = llsys.ScopeAbstractUnixSocket | llsys.ScopeSignal
	}
	return fs, net, scoped
}

// landlockPlan is the policy of every block: system directories readable
// and executable, /proc readable, the workdir, /tmp and /dev/shm writable,
// the harmless device nodes readable and writable, "/" listable, TCP
// bind/connect denied unless the network is enabled, abstract Unix sockets
// and signals scoped to the sandbox. Rights are reduced to what abi has.
func landlockPlan(sp *hook.Spec, abi int, rootFS bool) {
	fs, net, scoped := landlockHandled(abi)
	if sp.Network {
		net = 0
	}
	const (
		read  = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir
		write = llsys.AccessFSWriteFile | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile |
			llsys.AccessFSMakeChar | llsys.AccessFSMakeDir | llsys.AccessFSMakeReg | llsys.AccessFSMakeSock |
			llsys.AccessFSMakeFifo | llsys.AccessFSMakeBlock | llsys.AccessFSMakeSym | llsys.AccessFSTruncate
		file = llsys.AccessFSExecute | llsys.AccessFSWriteFile | llsys.AccessFSTruncate | llsys.AccessFSReadFile
	)
	sp.LandlockABI = int64(abi)
	sp.HandledFS, sp.HandledNet, sp.Scoped = fs, net, scoped
	sp.Rules = sp.Rules[:0]
	add := func(access uint64, optional bool, paths ...string) {
		for _, p := range paths {
			sp.Rules = append(sp.Rules, hook.LandlockRule{Path: p, Access: access & fs, Optional: optional})
		}
	}
	add(read, true, mount.SystemDirs...)
	add(read, true, "/etc")
	if sp.Shared != "" {
		shared := sp.Shared // no private root: the host path itself
		if rootFS {
			shared = hook.SharedMount
		}
		add(read, false, shared)
	}
	add(llsys.AccessFSReadFile|llsys.AccessFSReadDir, true, "/proc")
	if rootFS {
		add(read|write|llsys.AccessFSRefer, false, sp.Dir, "/tmp", "/dev/shm")
	} else {
		// Without a private root, /tmp and /dev/shm are the host's: only
		// the workdir may be written. It is named through the inherited
		// descriptor because our uid may not be allowed to traverse its
		// host parents.
		add(read|write|llsys.AccessFSRefer, false, "/proc/self/fd/"+strconv.Itoa(hook.DirFD))
	}
	add(read&file|write&file, true, "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
	add(llsys.AccessFSReadDir, false, "/")
}

// hostMountsBelowRoot are the host mounts below the directories a block's
// root mirrors (the shared dir is codellm's own: a mount below it fails its
// overlay, fail closed).
func hostMountsBelowRoot() []string {
	return hostMounts.below(append(append([]string(nil), mount.SystemDirs...), "/etc"))
}

// rootContents fills in what the helper writes and binds into the new root.
func rootContents(sp *hook.Spec) {
	sp.SystemDirs = mount.SystemDirs
	sp.EtcEntries = mount.EtcEntries
	if sp.Network {
		sp.EtcEntries = append(append([]string{}, mount.EtcEntries...), "resolv.conf", "gai.conf")
	}
	sp.DevNodes = mount.DevNodes
	if sp.Mech&hook.MOverlay != 0 {
		sp.HostMounts = hostMountsBelowRoot()
		if sp.ProbeOnly {
			sp.ProbeSocket = hook.ProbeSocketName // trialSpawn listens on it
		}
	}
	sp.Passwd = fmt.Appendf(nil, "root:x:0:0:root:/:/usr/sbin/nologin\n%s:x:%d:%d:codellm sandbox:%s:/bin/sh\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n", sandboxUser, sandboxUID, sandboxGID, sp.Dir)
	sp.Group = fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", sandboxUser, sandboxGID)
	sp.Hosts = []byte("127.0.0.1\tlocalhost " + sandboxHost + "\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	sp.Hostname = []byte(sandboxHost + "\n")
	sp.Staging = "/tmp"
	sp.UTSName = sandboxHost
}
