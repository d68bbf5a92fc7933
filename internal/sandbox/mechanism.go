package sandbox

import "strings"

// Mechanism names, as used in Report, logs and UnavailableError.
const (
	MechHelper       = "helper"       // re-exec of codellm as the sandbox helper
	MechUserNS       = "userns"       // user namespace with one mapped unprivileged uid
	MechPIDNS        = "pidns"        // PID namespace (block is its init; private /proc)
	MechMountNS      = "mountns"      // mount namespace
	MechNetNS        = "netns"        // network namespace (empty unless Network)
	MechIPCNS        = "ipcns"        // IPC namespace
	MechUTSNS        = "utsns"        // UTS namespace (own hostname)
	MechCgroupNS     = "cgroupns"     // cgroup namespace
	MechRootFS       = "rootfs"       // pivot_root onto a minimal read-only root
	MechLandlock     = "landlock"     // Landlock LSM file/net/scope rules
	MechSeccomp      = "seccomp"      // seccomp-bpf deny list
	MechCgroup       = "cgroup"       // per-run cgroup (memory+swap, pids, CPU)
	MechRlimit       = "rlimit"       // per-process rlimits backstop
	MechNoNewPrivs   = "nonewprivs"   // PR_SET_NO_NEW_PRIVS
	MechCapabilities = "capabilities" // every capability dropped before exec
	MechOverlay      = "overlay"      // host directories of the private root as read-only overlays (host sockets refuse connect)
)

// mechSet is a bit set of mechanisms.
type mechSet uint32

const (
	mHelper mechSet = 1 << iota
	mUserNS
	mPIDNS
	mMountNS
	mNetNS
	mIPCNS
	mUTSNS
	mCgroupNS
	mRootFS
	mLandlock
	mSeccomp
	mCgroup
	mRlimit
	mNoNewPrivs
	mCaps
	mOverlay
	mAll = mOverlay<<1 - 1
)

var mechNames = []struct {
	bit  mechSet
	name string
	fix  string
}{
	{mHelper, MechHelper, "run codellm from a readable executable path; main must call sandbox.Main (or import the package)"},
	{mUserNS, MechUserNS, "enable unprivileged user namespaces: sysctl user.max_user_namespaces=15000 (and kernel.unprivileged_userns_clone=1 / kernel.apparmor_restrict_unprivileged_userns=0 where present)"},
	{mPIDNS, MechPIDNS, "use a kernel with CONFIG_PID_NS"},
	{mMountNS, MechMountNS, "use a kernel with mount namespaces; in containers allow unshare/mount (e.g. a seccomp profile permitting them)"},
	{mNetNS, MechNetNS, "use a kernel with CONFIG_NET_NS"},
	{mIPCNS, MechIPCNS, "use a kernel with CONFIG_IPC_NS"},
	{mUTSNS, MechUTSNS, "use a kernel with CONFIG_UTS_NS"},
	{mCgroupNS, MechCgroupNS, "use a kernel with CONFIG_CGROUPS namespaces (4.6+)"},
	{mRootFS, MechRootFS, "allow mounting tmpfs/proc and pivot_root inside a user namespace (not blocked by the container runtime)"},
	{mLandlock, MechLandlock, "boot a kernel with CONFIG_SECURITY_LANDLOCK and landlock in lsm= (e.g. lsm=landlock,lockdown,yama,apparmor,bpf)"},
	{mSeccomp, MechSeccomp, "use a kernel with CONFIG_SECCOMP_FILTER"},
	{mCgroup, MechCgroup, "give codellm a writable cgroup (cgroup v2 delegation, e.g. systemd Delegate=yes, or run as root with v1 memory and pids controllers)"},
	{mRlimit, MechRlimit, "setrlimit must be permitted"},
	{mNoNewPrivs, MechNoNewPrivs, "use a kernel with PR_SET_NO_NEW_PRIVS (3.5+)"},
	{mCaps, MechCapabilities, "capset/prctl must be permitted"},
	{mOverlay, MechOverlay, "use a kernel whose overlayfs mounts in a user namespace (5.11+, CONFIG_OVERLAY_FS) over lower filesystems it accepts (not nested more than one overlay deep); or run --sandbox besteffort, which binds the directories instead and leaves host Unix sockets under them connectable"},
}

func (m mechSet) has(b mechSet) bool { return m&b == b }

func (m mechSet) names() []string {
	var out []string
	for _, e := range mechNames {
		if m&e.bit != 0 {
			out = append(out, e.name)
		}
	}
	return out
}

func (m mechSet) String() string { return strings.Join(m.names(), ",") }

func mechByName(name string) (mechSet, bool) {
	for _, e := range mechNames {
		if e.name == name {
			return e.bit, true
		}
	}
	return 0, false
}

func mechFix(b mechSet) string {
	for _, e := range mechNames {
		if e.bit == b {
			return e.fix
		}
	}
	return ""
}

func mechName(b mechSet) string {
	for _, e := range mechNames {
		if e.bit == b {
			return e.name
		}
	}
	return "unknown"
}

// first returns the lowest mechanism bit in m.
func (m mechSet) first() mechSet { return m & -m }
