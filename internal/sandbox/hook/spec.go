package hook

// Marker is argv[1] of the re-executed helper. It is not a flag any codellm
// command accepts, so the helper can never be entered by accident.
const Marker = "\x01codellm-sandbox-helper"

// EnvMarker is set (to "1") in the helper's own environment, never the
// program's. The helper check reads the environment first because it costs
// no syscall, so ordinary codellm processes pay nothing for the hook.
const EnvMarker = "CODELLM_SANDBOX_HELPER"

// EnvPooled is set (to "1") in the environment of a helper started ahead
// of need, before its block exists: its SpecFD is a Unix socket on which
// the block's stdin, stdout, stderr and workdir arrive (SCM_RIGHTS) ahead
// of the spec; until then its descriptors 0-2 and DirFD are /dev/null.
const EnvPooled = "CODELLM_SANDBOX_POOLED"

// Descriptor numbers in the helper: 0-2 are the block's stdio, the spec
// arrives on SpecFD and setup errors leave on StatusFD.
const (
	SpecFD   = 3
	StatusFD = 4
	// DirFD is the workdir opened by the server: the helper's uid may not be
	// allowed to traverse the workdir's parent directories on the host.
	DirFD = 5
	// NetFD is one end of a Unix socket pair, present only when the block
	// has an egress proxy: the helper sends the listening socket it made
	// inside the block's network namespace back on it (SCM_RIGHTS).
	NetFD = 6
)

// EgressPort is where the egress listener sits on the loopback of the
// block's network namespace (each block has its own namespace, so one
// fixed port serves them all).
const EgressPort = 3128

// Started is written on the status pipe right before execve: EOF after it
// means the program runs; anything after it is a failure report; EOF
// without it means the helper died during setup. An init writes it once
// the program runs, followed by the program's PID in the block's PID
// namespace (4 bytes little-endian, [StartedRecord]): codellm signals the
// program itself, and finds it by that PID.
const Started = 'X'

// waitTag starts the init's last report: waitTag, then the program's raw
// wait status (4 bytes little-endian). A PID-namespace init cannot die of a
// signal it raises itself, so this record, not the init's own exit status,
// says how the program ended; an init killed from outside (codellm's
// SIGKILL) writes none.
const waitTag = 'W'

// failTag starts a failure report: failTag, the mechanism bit (4 bytes
// little-endian; 0 for the exec of the program), then the reason text.
const failTag = 'E'

// Mechanism bits; package sandbox's mechSet uses the same values (a test
// there checks it).
const (
	MHelper uint32 = 1 << iota
	MUserNS
	MPIDNS
	MMountNS
	MNetNS
	MIPCNS
	MUTSNS
	MCgroupNS
	MRootFS
	MLandlock
	MSeccomp
	MCgroup
	MRlimit
	MNoNewPrivs
	MCaps
	// MOverlay mounts the host directories of the private root (MRootFS) as
	// read-only overlays with only lower layers instead of plain binds (see
	// sysTree): a host Unix socket under them then refuses connect.
	MOverlay
)

// MExec marks a failure of the final execve of the user's program.
const MExec uint32 = 0

// LandlockRule grants Access beneath Path (a path inside the new root). A
// missing Optional path is skipped; a missing required one fails the block.
type LandlockRule struct {
	Path     string
	Access   uint64
	Optional bool
}

// ProbeSocketName is the trial spawn's listening socket in its workdir (Spec.ProbeSocket).
const ProbeSocketName = "codellm-probe.sock"

// SharedMount is where Spec.Shared is bound in the new root (sandbox.SharedMount).
const SharedMount = "/codellm"

// Spec is everything the helper needs, computed by the server.
type Spec struct {
	Path      string
	Args, Env []string
	Dir       string // the working directory inside the sandbox
	HostDir   string // the workdir on the host (Dir, unless mounted elsewhere inside)
	Persist   bool
	DirIsTree bool // DirFD is a detached mount (open_tree) to attach
	Mech      uint32
	Network   bool
	ProbeOnly bool // apply everything, then exit 0 instead of exec'ing
	// Init keeps the helper as PID 1 of the block's PID namespace: it
	// starts the program as its child, reports its PID ([StartedRecord]),
	// reaps, and reports the program's wait status (see [WaitRecord])
	// before it exits.
	Init bool

	TmpSize, FileSize int64
	OpenFiles         int64
	CPUSeconds        uint64

	// Root filesystem contents.
	SystemDirs, EtcEntries, DevNodes []string
	Passwd, Group, Hosts, Hostname   []byte // generated /etc files
	Staging                          string // host dir to mount the new root on
	UTSName                          string // hostname inside (Mech has MUTSNS)
	Shared                           string // host dir bound read-only at SharedMount ("": none)
	// HostMounts are the server's mount points below the host directories
	// mirrored into the root (MOverlay only; see sysTree): a hint that
	// saves each helper reading /proc/self/mountinfo.
	HostMounts []string
	// Overlaid are host directories (system directories, /etc, the shared
	// dir) that are already read-only lower-only overlays, mounted in place
	// in the mount namespace this helper's was copied from: the
	// spawner's (package spawner). The helper binds them instead of
	// mounting an overlay of its own, after checking each is an overlay
	// (MOverlay only; empty when the helper was cloned from the server).
	Overlaid []string
	// ProbeSocket, in the trial spawn only (ProbeOnly with MOverlay), names
	// a socket the server listens on in the workdir: the helper checks that
	// connect() reaches it by its own path and is refused through an overlay.
	ProbeSocket string

	// Landlock (applied when Mech has MLandlock).
	LandlockABI                   int64
	HandledFS, HandledNet, Scoped uint64
	Rules                         []LandlockRule

	// Seccomp: the assembled classic-BPF program, 8 bytes per sock_filter
	// in native byte order (applied when Mech has MSeccomp).
	Seccomp []byte

	// CapLastCap is /proc/sys/kernel/cap_last_cap of the host.
	CapLastCap int64

	// Egress: bring up lo, listen on 127.0.0.1:EgressPort, send the socket
	// on NetFD; Landlock then allows TCP connect to that port only.
	Egress bool

	// Determ, when set, is the 32-byte key of a deterministic block: time
	// namespace, seeded /dev/urandom, getrandom → ENOSYS, ASLR off, umask
	// 022 (see setupDeterminism; the environment is the server's part).
	Determ []byte

	// ReadOnly binds a persistent workdir read-only.
	ReadOnly bool

	// FakeTimeRC, when set, is written as the new root's /etc/faketimerc:
	// libfaketime's fallback when getenv("FAKETIME") finds nothing, which
	// is the case in bash (see writeFakeTimeRC).
	FakeTimeRC []byte

	// Hold (with Init) keeps the block's namespace alive after the program
	// ends, so the server can read the private workdir through
	// /proc/<init>/root: the init kills and reaps everything else, writes
	// the wait record and waits for the server's SIGKILL. HoldSignal sent
	// to such an init ends the program (and everything else in the
	// namespace) at once, as SIGKILL would, but keeps the namespace.
	Hold bool

	// WorkSize is the size of the private workdir tmpfs (Persist false); 0: TmpSize.
	WorkSize int64
}

// WorkdirSize is the size of the private workdir tmpfs.
func (s *Spec) WorkdirSize() int64 {
	if s.WorkSize > 0 {
		return s.WorkSize
	}
	return s.TmpSize
}
