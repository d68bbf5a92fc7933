//go:build linux

package sandbox

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/sandbox/landlock"
)

// The kernel facilities below are probed when a Sandbox starts instead of
// assumed from the kernel version: a container's seccomp profile or an old
// kernel may lack any of them. Each is a line of the report (doctor,
// /readyz): what it gives, whether this host has it, and what codellm does
// without it — fall back (the raw helper needs close_range and, on cgroup
// v2, clone3; blocks then get the Go helper) or refuse naming it.
//
// probeFeature is the probes' table, a variable so that tests can fake a
// host that lacks one.
var probeFeature = map[string]func() error{
	// A range above any open descriptor: closes nothing.
	featCloseRange: func() error { return unix.CloseRange(1<<31-2, 1<<31-2, 0) },
	// clone3 with no arguments: EINVAL where it exists, ENOSYS or EPERM where
	// the kernel or a seccomp profile lacks it. Nothing is cloned.
	featClone3: func() error {
		_, _, e := syscall.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
		if e == syscall.EINVAL {
			return nil
		}
		return e
	},
	featPidfd: func() error {
		fd, err := unix.PidfdOpen(os.Getpid(), 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	},
	featTimeNS: func() error {
		_, err := os.Stat("/proc/self/ns/time")
		return err
	},
}

const (
	featCloseRange = "close_range"
	featClone3     = "clone3"
	featPidfd      = "pidfd"
	featTimeNS     = "time namespace"
)

// featureRoles says, per probed facility, what it gives codellm and what
// happens without it (the report's detail).
var featureRoles = map[string][2]string{
	featCloseRange: {"the raw helper places a block's descriptors with it (Linux 5.9)",
		"the raw helper is off: every block gets the Go helper"},
	featClone3: {"helpers are born in their block's cgroup (clone3 CLONE_INTO_CGROUP, cgroup v2, Linux 5.7)",
		"on cgroup v2 codellm moves each helper into its cgroup before it runs anything, and blocks get the Go helper"},
	featPidfd: {"a block's program is signalled and its init waited for through pidfds (Linux 5.3)",
		"signals go by PID after checking the init's children, and waits block a thread"},
	featTimeNS: {"deterministic mode starts the monotonic and boot clocks from zero (Linux 5.6)",
		"deterministic mode is unavailable"},
}

// featureOrder is the report's order.
var featureOrder = []string{featCloseRange, featClone3, featPidfd, featTimeNS}

// probeFeatures runs every probe once, notes the fallbacks they decide
// and returns the report's lines.
func (p *platform) probeFeatures() []FeatureStatus {
	var out []FeatureStatus
	for _, name := range featureOrder {
		err := probeFeature[name]()
		role := featureRoles[name]
		st := FeatureStatus{Name: name, Available: err == nil, Detail: role[0]}
		if err != nil {
			st.Detail = "missing (" + errText(err) + "): " + role[1]
			p.noteMissingFeature(name, err)
		}
		out = append(out, st)
	}
	return append(out, p.cloneIntoCgroupStatus(), landlockStatus(landlock.ABI()))
}

// noteMissingFeature records the fallback a missing facility decides.
func (p *platform) noteMissingFeature(name string, err error) {
	switch name {
	case featCloseRange:
		p.rawOff = featCloseRange + ": " + errText(err)
	case featClone3:
		p.noClone3 = true
		if p.cg != nil && p.cg.Info().Version == 2 {
			p.rawOff = featClone3 + ": " + errText(err) // it would have to join a v2 group from inside its user namespace
		}
	}
}

// cloneIntoCgroupStatus is CLONE_INTO_CGROUP's line: it needs clone3 and
// cgroup v2; the trial spawn proves it (a refusal there is blamed on the
// cgroup, startError).
func (p *platform) cloneIntoCgroupStatus() FeatureStatus {
	st := FeatureStatus{Name: "CLONE_INTO_CGROUP"}
	switch {
	case p.cg == nil:
		st.Detail = "not used: no cgroup"
	case p.cg.Info().Version != 2:
		st.Detail = "not used on cgroup v1: a helper joins its block's cgroup by cgroup.procs before it runs anything"
	case p.noClone3:
		st.Detail = "not used without clone3: codellm moves each helper into its cgroup before it runs anything"
	default:
		st.Available = true
		st.Detail = "every helper is born in its block's cgroup (the trial spawn checked it)"
	}
	return st
}

// landlockGives is what each Landlock ABI adds, from 1 (which native
// needs) to landlock.MaxABI (the newest codellm uses).
var landlockGives = []string{
	1: "filesystem access rules",
	2: "renames and links across directories (REFER)",
	3: "truncate",
	4: "TCP bind and connect rules",
	5: "ioctl on devices",
	6: "signal and abstract Unix socket scoping",
	7: "audit logging control",
}

// landlockStatus is the Landlock line: each ABI with what it gives,
// whether this kernel has it, and which codellm uses.
func landlockStatus(abi int) FeatureStatus {
	st := FeatureStatus{Name: "landlock ABIs", Available: abi >= 1}
	var have, lack []string
	for v := 1; v < len(landlockGives); v++ {
		s := strconv.Itoa(v) + " " + landlockGives[v]
		if v <= abi {
			have = append(have, s)
		} else {
			lack = append(lack, s)
		}
	}
	used := min(abi, landlock.MaxABI)
	switch {
	case abi < 1:
		st.Detail = "none: native needs ABI 1 (Linux 5.13, landlock in lsm=)"
	default:
		st.Detail = "uses ABI " + strconv.Itoa(used) + " (native needs 1): " + strings.Join(have, ", ")
	}
	if len(lack) > 0 {
		st.Detail += "; this kernel lacks " + strings.Join(lack, ", ")
	}
	return st
}

func errText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
	}
	return err.Error()
}
