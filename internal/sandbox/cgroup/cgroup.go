// Package cgroup gives every codellm run its own Linux control group so that
// the run as a whole is bounded (memory including swap, number of tasks, CPU
// quota), can be measured (peak memory, OOM kills, pids-limit hits, CPU time)
// and can be killed completely, daemonised descendants included.
//
// One run is one Group created with Host.NewGroup; each block of the run gets
// a child Group (Group.NewChild) so its own peak memory and CPU time can be
// read while the run's limits still apply to the sum of all blocks.
//
// Both cgroup v2 (the unified hierarchy, preferred) and cgroup v1 (one mount
// per controller) are supported. Detect decides which one is usable and, when
// neither is, returns an *UnavailableError that says what is missing and how
// an operator fixes it: the sandbox must fail closed rather than run code
// without limits.
//
// Putting processes in: on v2 start them directly inside a group with
// Group.FD (clone3 CLONE_INTO_CGROUP), which cannot race; on v1 call
// Group.Add before the process runs untrusted code, or let a privileged
// helper join itself through Group.ProcsFiles. On v2 a group that has
// children must not hold processes itself, so create the block children
// first and put processes only into them.
//
// Groups of a process that crashed or was SIGKILLed are never removed by
// it; Host.SweepStale removes such leftovers (empty groups whose name the
// caller recognises as a dead process's) and should run once at startup.
//
// Where the time goes (BenchmarkNewGroup, this 2-vCPU Firecracker VM with
// cgroup v1, where every cgroupfs syscall costs 20–100 µs): NewGroup with
// memory+pids+CPU limits is ~0.4 ms: five mkdirs (memory ~110 µs for the
// kernel's per-memcg allocation, cpu and cpuacct ~45 µs, pids and freezer
// ~20 µs) plus one write per limit (~40–60 µs each; unset limits cost
// nothing). On v2 it is one mkdir (~45 µs) plus the writes. Stats is ~0.4 ms
// on v1 (six small reads), Remove of an empty group ~1 ms (emptiness
// checks and rmdirs in every hierarchy); neither is needed before the
// response is sent except Kill and WaitEmpty.
//
// The package depends on nothing else in codellm.
package cgroup

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Limits bound a run as a whole. Zero means "no limit" for every field.
type Limits struct {
	// Memory is the limit in bytes for RAM plus swap of all tasks of the run.
	Memory int64
	// Pids is the maximum number of tasks (processes and threads) at once.
	Pids int
	// CPUs is the CPU bandwidth quota in cores (1.5 = one and a half cores).
	CPUs float64
}

// Info describes the hierarchy Detect chose, for logs, /readyz and
// `codellm doctor`.
type Info struct {
	Version     int      // 1 or 2; 0 when no usable hierarchy was found
	Controllers []string // controllers codellm uses, e.g. memory, pids, cpu
	Path        string   // directory under which run groups are created
	Err         string   // why cgroups are unusable (Version 0), else empty
	// Notes lists degradations an operator may want to know about, e.g.
	// "swap is not accounted" or why v2 was not chosen.
	Notes []string
}

// Stats are the measurements of a group, including its descendants.
type Stats struct {
	MemoryPeak int64         // high-water mark of memory (incl. swap where accounted), bytes
	OOMKills   int64         // processes killed by the OOM killer inside the group
	PidsMax    int64         // times a fork/clone failed because the pids limit was hit
	CPU        time.Duration // CPU time consumed (user+system)
}

// Sentinel errors; every error returned by this package wraps one of them
// (or is an *fs.PathError from the kernel interface files).
var (
	// ErrUnavailable: no usable cgroup hierarchy (see *UnavailableError).
	ErrUnavailable = errors.New("cgroup: no usable cgroup hierarchy")
	// ErrInvalidName: a group name that could escape its parent or clash
	// with kernel interface files.
	ErrInvalidName = errors.New("cgroup: invalid group name")
	// ErrInvalidLimits: negative, NaN or too small limits.
	ErrInvalidLimits = errors.New("cgroup: invalid limits")
	// ErrExists: a group of that name already exists (stale or concurrent);
	// it is never reused because it may hold foreign processes.
	ErrExists = errors.New("cgroup: group already exists")
	// ErrNotSupported: the requested limit or operation needs a controller
	// or kernel feature this host does not offer.
	ErrNotSupported = errors.New("cgroup: not supported on this host")
	// ErrRemoved: the group was already removed.
	ErrRemoved = errors.New("cgroup: group removed")
	// ErrBusy: the group still has processes (e.g. Remove timed out) or the
	// v2 "no internal processes" rule forbids the operation.
	ErrBusy = errors.New("cgroup: group busy")
)

// UnavailableError explains, per cgroup version, why it cannot be used.
type UnavailableError struct {
	V2 string // why cgroup v2 is unusable
	V1 string // why cgroup v1 is unusable
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("cgroup: no usable hierarchy: cgroup v2: %s; cgroup v1: %s", e.V2, e.V1)
}

// Unwrap makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Unwrap() error { return ErrUnavailable }

// maxNameLen keeps names well below NAME_MAX (255) so that kernel-side
// suffixes and our own reserved names never overflow.
const maxNameLen = 128

// reservedName is the v2 leaf the server moves itself into so that its own
// cgroup may delegate controllers to run groups (no internal processes rule).
const reservedName = "supervisor"

// ValidateName reports whether name is acceptable as a group name: 1..128
// bytes of [A-Za-z0-9_.-], not starting with '.', and not the reserved v2
// leaf "supervisor". The strict alphabet rules out "/", "..", NUL and
// whitespace, and the first-character rule rules out names that look like
// interface files' hidden siblings; names containing a '.' are additionally
// refused when they start with a controller prefix such as "memory." because
// cgroupfs already has files of that shape.
func ValidateName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%w: %q: length must be 1..%d", ErrInvalidName, name, maxNameLen)
	}
	if name[0] == '.' {
		return fmt.Errorf("%w: %q: must not start with '.'", ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
		if !ok {
			return fmt.Errorf("%w: %q: only [A-Za-z0-9_.-] allowed", ErrInvalidName, name)
		}
	}
	if name == reservedName {
		return fmt.Errorf("%w: %q is reserved for the server's own leaf cgroup", ErrInvalidName, name)
	}
	if i := strings.IndexByte(name, '.'); i > 0 {
		switch name[:i] {
		case "cgroup", "memory", "pids", "cpu", "cpuacct", "cpuset", "io", "freezer", "hugetlb", "rdma", "misc", "blkio", "devices", "net_cls", "net_prio", "perf_event", "notify_on_release", "release_agent", "tasks":
			return fmt.Errorf("%w: %q looks like a cgroup interface file", ErrInvalidName, name)
		}
	}
	return nil
}

// cfsPeriodUs is the CFS bandwidth period used for CPU quotas. 100 ms is the
// kernel default; shorter periods cost scheduler overhead, longer ones make a
// throttled run stall visibly.
const cfsPeriodUs = 100000

// minQuotaUs is the kernel's minimum CFS quota (1 ms).
const minQuotaUs = 1000

func (l Limits) validate() error {
	if l.Memory < 0 {
		return fmt.Errorf("%w: memory %d < 0", ErrInvalidLimits, l.Memory)
	}
	if l.Memory > 0 && l.Memory < 1<<20 {
		// Below 1 MiB not even a shell starts; such a value is a unit mistake.
		return fmt.Errorf("%w: memory %d bytes is below 1 MiB", ErrInvalidLimits, l.Memory)
	}
	if l.Pids < 0 {
		return fmt.Errorf("%w: pids %d < 0", ErrInvalidLimits, l.Pids)
	}
	if math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs < 0 {
		return fmt.Errorf("%w: cpus %v", ErrInvalidLimits, l.CPUs)
	}
	if l.CPUs > 0 && l.quotaUs() < minQuotaUs {
		return fmt.Errorf("%w: cpus %v is below the kernel minimum quota (%.2f cores)", ErrInvalidLimits, l.CPUs, float64(minQuotaUs)/cfsPeriodUs)
	}
	if l.CPUs > 1<<20 {
		return fmt.Errorf("%w: cpus %v is absurdly large", ErrInvalidLimits, l.CPUs)
	}
	return nil
}

func (l Limits) quotaUs() int64 { return int64(math.Round(l.CPUs * cfsPeriodUs)) }
