package sandbox

import (
	"strconv"
	"strings"

	"github.com/codellm/codellm/internal/sandbox/cgroup"

	"golang.org/x/sys/unix"
)

// sweepStaleGroups removes the run cgroups of codellm processes that died
// without closing their runs (crash, SIGKILL, OOM kill of codellm itself):
// nothing else ever removes them, so they would accumulate forever. It runs
// once per New, wherever cgroups are usable (also in off mode, which uses a
// kill-only run group). A group goes only when its name is one codellm
// gives run groups and the pid in that name is not a running process. What
// such a group still holds is first killed (cgroup.Host.KillStale): blocks
// of a codellm that died while it was killing them on v1, frozen for good
// (issue 35 item 7). Failure is logged, never returned: the sweep is
// hygiene, not a protection.
func (s *Sandbox) sweepStaleGroups() {
	h := s.plat.cg
	if h == nil {
		return
	}
	stale := func(name string) bool {
		pid, ok := runGroupOwner(name)
		return ok && !pidAlive(pid)
	}
	if k, err := h.KillStale(stale, cgroup.DefaultWait); k > 0 || err != nil {
		s.log.Warn("sandbox: killed what was left in run cgroups of dead codellm processes", "groups", k, "err", err)
	}
	n, err := h.SweepStale(stale)
	if n > 0 {
		s.log.Info("sandbox: removed stale run cgroups of dead codellm processes", "count", n)
	}
	if err != nil {
		s.log.Warn("sandbox: sweeping stale run cgroups failed (harmless; they stay behind)", "err", err)
	}
}

// maxPid is the kernel's upper bound for pid_max (PID_MAX_LIMIT, 2^22).
const maxPid = 1 << 22

// runGroupOwner parses the names codellm gives its run groups and returns
// the pid of the process that created it:
//
//	codellm-<pid>-<instanceID>-<seq>        (Run.init)
//	codellm-probe-<pid>-<instanceID>-<seq>  (trialSpawn)
//	codellm-<pid>-<seq>                     (before instanceID existed)
//
// with <pid> and <seq> positive decimals without leading zeros and
// <instanceID> 8 lowercase hex digits. Anything else is not ours.
func runGroupOwner(name string) (pid int, ok bool) {
	rest, found := strings.CutPrefix(name, "codellm-")
	if !found {
		return 0, false
	}
	parts := strings.Split(rest, "-")
	probe := false
	if parts[0] == "probe" {
		probe = true
		parts = parts[1:]
	}
	switch {
	case len(parts) == 3 && isInstanceID(parts[1]):
	case len(parts) == 2 && !probe:
	default:
		return 0, false
	}
	pid, ok = positive(parts[0])
	if !ok || pid > maxPid {
		return 0, false
	}
	if _, ok := positive(parts[len(parts)-1]); !ok {
		return 0, false
	}
	return pid, true
}

// positive parses a decimal > 0 without sign or leading zeros.
func positive(s string) (int, bool) {
	if s == "" || len(s) > 18 || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

func isInstanceID(s string) bool {
	if len(s) != 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// pidAlive reports whether pid may be a running process. Only ESRCH counts
// as dead: a live pid is kept even if the kernel reused it for another
// program (the group is then swept by a later start), and EPERM means a
// process exists.
func pidAlive(pid int) bool {
	return unix.Kill(pid, 0) != unix.ESRCH
}
