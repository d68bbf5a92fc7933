package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Group is one cgroup (in every hierarchy the Host uses). Its methods are
// safe for concurrent use.
type Group struct {
	host   *Host
	name   string
	parent *Group   // nil for a run group
	dirs   []string // one directory per host hierarchy, same order as host.hiers; "" where an accounting child has none
	rels   []string // the same as cgroup paths (as in /proc/<pid>/cgroup)

	mu        sync.Mutex
	fd        int // v2: cached directory fd for CLONE_INTO_CGROUP, -1 if not opened
	removed   bool
	delegated bool // v2: controllers enabled in our subtree_control

	// kidsMu guards children on its own (taken inside mu, never the other
	// way round), so that walks of the tree need not take mu, which Remove
	// holds throughout.
	kidsMu   sync.Mutex
	children []*Group
}

// DefaultWait is a sensible bound for WaitEmpty after Kill: SIGKILLed
// processes normally vanish within milliseconds; a longer stay means a task
// stuck in uninterruptible sleep.
const DefaultWait = 2 * time.Second

// removeTimeout bounds how long Remove waits for killed processes to leave.
const removeTimeout = DefaultWait

// NewGroup creates the run group name below Info().Path with the given
// limits. Names must pass ValidateName; an existing group of that name is
// an error (ErrExists), never reused. A limit the host cannot enforce is an
// error (ErrNotSupported): the caller decides whether to run without it.
//
// Cost: one mkdir per hierarchy (1 on v2, up to 4 on v1 — the kernel
// allocates per-cgroup state, for memory cgroups per-CPU counters, which
// dominates) plus one small write per limit.
func (h *Host) NewGroup(name string, lim Limits) (*Group, error) {
	if h.err != nil {
		return nil, h.err
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := lim.validate(); err != nil {
		return nil, err
	}
	if lim.Memory > 0 && h.mem < 0 {
		return nil, fmt.Errorf("%w: memory limit requested but the memory controller is unavailable", ErrNotSupported)
	}
	if lim.Pids > 0 && h.pids < 0 {
		return nil, fmt.Errorf("%w: pids limit requested but the pids controller is unavailable", ErrNotSupported)
	}
	if lim.CPUs > 0 && h.cpu < 0 {
		return nil, fmt.Errorf("%w: CPU quota requested but the cpu controller is unavailable", ErrNotSupported)
	}
	g, err := h.mkGroup(name, nil, nil)
	if err != nil {
		return nil, err
	}
	if err := g.setup(lim); err != nil {
		g.rmdirAll()
		return nil, err
	}
	return g, nil
}

// mkGroup creates the directories of a new group below parent (or the host
// bases), undoing partial work on failure.
func (h *Host) mkGroup(name string, parent *Group, own func(hr hier) bool) (*Group, error) {
	g := &Group{host: h, name: name, parent: parent, fd: -1, dirs: make([]string, len(h.hiers)), rels: make([]string, len(h.hiers))}
	for i, hr := range h.hiers {
		pdir, prel := hr.base, hr.rel
		if parent != nil {
			pdir, prel = parent.dirs[i], parent.rels[i]
		}
		if pdir == "" || (own != nil && !own(hr)) {
			continue // an accounting child's processes stay in its parent's group here
		}
		g.dirs[i] = pdir + "/" + name
		g.rels[i] = strings.TrimSuffix(prel, "/") + "/" + name
	}
	for i, d := range g.dirs {
		if d == "" {
			continue
		}
		if err := unix.Mkdir(d, 0o755); err != nil {
			for _, done := range g.dirs[:i] {
				if done != "" {
					_ = unix.Rmdir(done)
				}
			}
			if err == unix.EEXIST {
				return nil, fmt.Errorf("%w: %s", ErrExists, d)
			}
			return nil, &fs.PathError{Op: "mkdir", Path: d, Err: err}
		}
	}
	return g, nil
}

// setup writes the limits of a fresh run group. Files are written only for
// limits that are set: a new cgroup starts unlimited, and every write is a
// syscall on the request hot path.
func (g *Group) setup(lim Limits) error {
	h := g.host
	if h.version == 2 {
		d := g.dirs[0]
		if h.mem >= 0 {
			if lim.Memory > 0 {
				if err := writeFile(d+"/memory.max", strconv.FormatInt(lim.Memory, 10)); err != nil {
					return err
				}
				// Swap counts against the limit by forbidding it: memory.max
				// then bounds RAM+swap. Absent when the kernel has no swap
				// accounting, in which case there is no swap to escape to.
				if _, err := writeOptional(d+"/memory.swap.max", "0"); err != nil {
					return err
				}
			}
			// An OOM inside the run kills the whole run, not one random
			// process that a supervisor loop would just restart.
			if _, err := writeOptional(d+"/memory.oom.group", "1"); err != nil {
				return err
			}
		}
		if lim.Pids > 0 {
			if err := writeFile(d+"/pids.max", strconv.Itoa(lim.Pids)); err != nil {
				return err
			}
		}
		if lim.CPUs > 0 {
			if err := writeFile(d+"/cpu.max", fmt.Sprintf("%d %d", lim.quotaUs(), cfsPeriodUs)); err != nil {
				return err
			}
		}
		return nil
	}
	if h.mem >= 0 {
		d := g.dirs[h.mem]
		if h.setUseHierarchy {
			// Without it, block (child) groups would not count against
			// the run's limit.
			if err := writeFile(d+"/memory.use_hierarchy", "1"); err != nil {
				return err
			}
		}
		if lim.Memory > 0 {
			v := strconv.FormatInt(lim.Memory, 10)
			// memory.limit must be set before memsw (memsw >= limit).
			if err := writeFile(d+"/memory.limit_in_bytes", v); err != nil {
				return err
			}
			if h.memsw {
				if err := writeFile(d+"/memory.memsw.limit_in_bytes", v); err != nil {
					return err
				}
			}
		}
	}
	if lim.Pids > 0 {
		if err := writeFile(g.dirs[h.pids]+"/pids.max", strconv.Itoa(lim.Pids)); err != nil {
			return err
		}
	}
	if lim.CPUs > 0 {
		// A new group always starts with the kernel's default 100 ms period
		// (it is not inherited), which is cfsPeriodUs: only the quota needs
		// a write.
		if err := writeFile(g.dirs[h.cpu]+"/cpu.cfs_quota_us", strconv.FormatInt(lim.quotaUs(), 10)); err != nil {
			return err
		}
	}
	return nil
}

// NewChild creates a per-block child group without limits of its own; the
// run's limits still apply to it. On cgroup v2 the first NewChild delegates
// the controllers to children, which the kernel refuses once processes were
// added to g itself ("no internal processes"): create children before Add,
// and put processes only into children (ErrBusy otherwise).
func (g *Group) NewChild(name string) (*Group, error) { return g.newChild(name, nil) }

// NewAccountingChild is NewChild for a child that only measures: on cgroup v1 it has a directory of its
// own only in the hierarchies whose controllers report per-group numbers that Stats reads (memory, pids,
// cpuacct); in the others (cpu alone, freezer) its processes live in the parent's group, which saves a
// directory's creation and removal in each (about 0.1 ms of kernel time apiece on a 2-core VM). Its Kill
// therefore cannot freeze it first (the freezer would stop the parent's whole group): it signals the
// members it lists. Use it where the group's processes are ended otherwise (a PID namespace's init). On v2
// it is NewChild.
func (g *Group) NewAccountingChild(name string) (*Group, error) {
	if g.host.version == 2 {
		return g.newChild(name, nil)
	}
	return g.newChild(name, func(hr hier) bool {
		return slices.ContainsFunc(hr.ctrls, func(c string) bool { return c == "memory" || c == "pids" || c == "cpuacct" })
	})
}

// Accounting reports whether g was made by NewAccountingChild on v1 (some hierarchy has no directory of its own).
func (g *Group) Accounting() bool { return slices.Contains(g.dirs, "") }

func (g *Group) newChild(name string, own func(hr hier) bool) (*Group, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil, ErrRemoved
	}
	h := g.host
	if h.version == 2 && !g.delegated && len(h.hiers[0].ctrls) > 0 {
		var b strings.Builder
		for i, c := range h.hiers[0].ctrls {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString("+" + c)
		}
		if err := writeFile(g.dirs[0]+"/cgroup.subtree_control", b.String()); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return nil, fmt.Errorf("%w: %s already holds processes; cgroup v2 cannot give it child groups with controllers: create children before adding processes: %v", ErrBusy, g.dirs[0], err)
			}
			return nil, err
		}
		g.delegated = true
	}
	c, err := h.mkGroup(name, g, own)
	if err != nil {
		return nil, err
	}
	g.kidsMu.Lock()
	g.children = append(g.children, c)
	g.kidsMu.Unlock()
	return c, nil
}

// Path is the group's directory: on v2 its only one, on v1 the one in the
// memory hierarchy (the others mirror it under their own mounts).
func (g *Group) Path() string {
	if g.host.version == 1 {
		return g.dirs[g.host.mem]
	}
	return g.dirs[0]
}

// dirAt is the directory that holds g's processes in hierarchy i: its own, or (an accounting child) its
// nearest ancestor's.
func (g *Group) dirAt(i int) string {
	for c := g; c != nil; c = c.parent {
		if c.dirs[i] != "" {
			return c.dirs[i]
		}
	}
	return g.host.hiers[i].base
}

// Add moves process pid (all its threads) into the group in every hierarchy.
// On v1 the moves are not atomic across hierarchies: a process that forks
// during Add may leave a child behind in some hierarchy, so add processes
// before they run user code (stopped, or from the child before exec). On v2
// prefer starting the process directly in the group with FD.
func (g *Group) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: invalid pid %d", pid)
	}
	g.mu.Lock()
	removed := g.removed
	g.mu.Unlock()
	if removed {
		return ErrRemoved
	}
	s := strconv.Itoa(pid)
	for i := range g.dirs {
		d := g.dirAt(i)
		if err := writeFile(d+"/cgroup.procs", s); err != nil {
			if errors.Is(err, unix.EBUSY) && g.host.version == 2 {
				return fmt.Errorf("%w: %s has child groups with controllers; add processes to a leaf (child) group: %v", ErrBusy, d, err)
			}
			return err
		}
	}
	return nil
}

// ProcsFiles lists the cgroup.procs file of the group in every hierarchy.
// A helper process that runs between fork and the user's code (a re-exec'd
// init, still privileged) can join the group itself by writing "0" to each,
// which on v1 avoids the fork race described at Add.
func (g *Group) ProcsFiles() []string {
	out := make([]string, len(g.dirs))
	for i := range g.dirs {
		out[i] = g.dirAt(i) + "/cgroup.procs"
	}
	return out
}

// TaskFiles lists the v1 tasks file of the group in every hierarchy (nil on
// v2). A single-threaded process joins the group by writing "0" (itself)
// to each: moving one thread, the kernel skips the global
// cgroup_threadgroup_rwsem a cgroup.procs write takes, whose down_write
// waits for an RCU grace period unless another migration came shortly
// before (9.4 ms measured here, once per block at a low request rate).
// Moving the only thread moves the process; a process with more threads
// must use ProcsFiles.
func (g *Group) TaskFiles() []string {
	if g.host.version != 1 {
		return nil
	}
	out := make([]string, len(g.dirs))
	for i := range g.dirs {
		out[i] = g.dirAt(i) + "/tasks"
	}
	return out
}

// FD returns a directory fd of the group for clone3(CLONE_INTO_CGROUP)
// (os/exec: SysProcAttr{UseCgroupFD: true, CgroupFD: fd}), which places the
// new process into the group atomically before it runs. Only on cgroup v2.
// The fd is owned by the group, opened once, and closed by Remove.
func (g *Group) FD() (fd int, ok bool) {
	if g.host.version != 2 {
		return -1, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return -1, false
	}
	if g.fd < 0 {
		// O_PATH fds are rejected by clone3 (it needs a real open file).
		fd, err := unix.Open(g.dirs[0], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, false
		}
		g.fd = fd
	}
	return g.fd, true
}

// Kill sends SIGKILL to every process in the group and its children,
// including processes that left the process group or session (setsid,
// double fork): membership is by cgroup, which a process cannot leave.
//
// v2 writes cgroup.kill (Linux 5.14+), which the kernel applies atomically,
// also to tasks forked concurrently. Otherwise (v2 without cgroup.kill, v1)
// the group is frozen so nothing can fork, every member is killed, and the
// group is thawed so the signals are delivered. Kill does not wait; Remove
// and WaitEmpty do.
func (g *Group) Kill() error {
	g.mu.Lock()
	removed := g.removed
	g.mu.Unlock()
	if removed {
		return nil
	}
	return g.kill()
}

func (g *Group) kill() error {
	h := g.host
	if h.version == 2 {
		present, err := writeOptional(g.dirs[0]+"/cgroup.kill", "1")
		if present || err != nil {
			return err
		}
	}
	// An empty group (the common case at teardown: every block was its PID
	// namespace's init and has been reaped) needs no freeze and thaw —
	// three writes and a read per hierarchy on v1. A process can only
	// appear in it by being added or forked by a member, and forks are what
	// the freeze guards against, so with no member there is nothing to race.
	if pop, err := g.Populated(); err == nil && !pop {
		return nil
	}
	thaw, ferr := g.freeze()
	kerr := g.signalAll()
	if thaw != nil {
		if err := thaw(); err != nil && kerr == nil {
			kerr = err
		}
	}
	if kerr == nil && ferr != nil && !errors.Is(ferr, errNoFreezer) {
		kerr = ferr
	}
	return kerr
}

var errNoFreezer = errors.New("no freezer")

// freezeTimeout bounds waiting for FREEZING to become FROZEN (tasks in
// uninterruptible sleep delay it); we kill anyway afterwards, the freeze is
// only there to stop forks racing the kill.
const freezeTimeout = 500 * time.Millisecond

// freeze freezes the group and returns the function that thaws it.
func (g *Group) freeze() (thaw func() error, err error) {
	h := g.host
	if h.freezer < 0 {
		return nil, errNoFreezer
	}
	d := g.dirs[h.freezer]
	if d == "" {
		return nil, errNoFreezer // an accounting child: freezing would stop its parent's whole group
	}
	if h.version == 2 {
		present, err := writeOptional(d+"/cgroup.freeze", "1")
		if !present || err != nil {
			return nil, errors.Join(errNoFreezer, err)
		}
		thaw = func() error { return writeFile(d+"/cgroup.freeze", "0") }
		deadline := time.Now().Add(freezeTimeout)
		for time.Now().Before(deadline) {
			if v, err := readKey(d+"/cgroup.events", "frozen"); err != nil || v == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		return thaw, nil
	}
	if err := writeFile(d+"/freezer.state", "FROZEN"); err != nil {
		return nil, err
	}
	thaw = func() error { return writeFile(d+"/freezer.state", "THAWED") }
	deadline := time.Now().Add(freezeTimeout)
	for time.Now().Before(deadline) {
		b, err := readSmall(d + "/freezer.state")
		if err != nil || strings.TrimSpace(string(b)) == "FROZEN" {
			break
		}
		// Re-writing FROZEN makes the kernel retry tasks that were busy.
		_ = writeFile(d+"/freezer.state", "FROZEN")
		time.Sleep(time.Millisecond)
	}
	return thaw, nil
}

// signalAll SIGKILLs every member of the group's subtree in every hierarchy.
// A pid read from cgroup.procs may exit and be reused before we signal it,
// so each is pinned with a pidfd and re-checked for membership first.
func (g *Group) signalAll() error {
	seen := map[int]bool{}
	var firstErr error
	for i := range g.dirs {
		dirs, err := g.treeDirs(i)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return err
		}
		for _, sd := range dirs {
			pids, err := readPids(sd + "/cgroup.procs")
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return err
			}
			for _, pid := range pids {
				if seen[pid] {
					continue
				}
				seen[pid] = true
				if err := g.killPid(pid, i); err != nil && firstErr == nil {
					firstErr = err
				}
			}
		}
	}
	return firstErr
}

func (g *Group) killPid(pid, hi int) error {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err == unix.ESRCH {
		return nil // already gone
	}
	if err != nil {
		// pidfd unsupported (pre-5.3): accept the tiny reuse race.
		if e := unix.Kill(pid, unix.SIGKILL); e != nil && e != unix.ESRCH {
			return fmt.Errorf("cgroup: kill %d: %w", pid, e)
		}
		return nil
	}
	defer unix.Close(pfd)
	if !g.member(pid, hi) {
		return nil
	}
	if err := unix.PidfdSendSignal(pfd, unix.SIGKILL, nil, 0); err != nil && err != unix.ESRCH {
		return fmt.Errorf("cgroup: kill %d: %w", pid, err)
	}
	return nil
}

// member reports whether pid is (still) inside the group's subtree in
// hierarchy hi, according to /proc/<pid>/cgroup.
func (g *Group) member(pid, hi int) bool {
	b, err := readSmall("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	id := g.host.hiers[hi].id
	want := g.rels[hi]
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if n, err := strconv.Atoi(parts[0]); err != nil || n != id {
			continue
		}
		if g.host.version == 2 && parts[1] != "" {
			continue
		}
		p := parts[2]
		return p == want || strings.HasPrefix(p, want+"/")
	}
	return false
}

// Populated reports whether any process is in the group or its children.
// An exited but unreaped process (a zombie) does not count, as for rmdir.
//
// v2 reads cgroup.events. v1 lists cgroup.procs in every hierarchy and
// every child, unless pids.current of the pids hierarchy (which v1
// requires) says 0 first: the controller charges every task, zombies
// included, to its cgroup and all its ancestors, so 0 means the subtree
// holds none. Populated is asked at least twice per closed run, almost
// always of an empty group; listing was ten reads on this host, each
// building a pid list the kernel frees a second later (2.6 % of a
// one-block request's CPU), where pids.current is one small read. The
// shortcut relies on Add's contract (processes join before they can fork,
// so every hierarchy agrees); a process left behind in another hierarchy
// would still make that directory's rmdir fail in Remove, loudly.
func (g *Group) Populated() (bool, error) {
	if g.host.version == 2 {
		v, err := readKey(g.dirs[0]+"/cgroup.events", "populated")
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return v != 0, err
	}
	if hi := g.host.pids; hi >= 0 {
		b, err := readSmall(g.dirs[hi] + "/pids.current")
		if v, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && perr == nil && v == 0 {
			return false, nil
		}
	}
	return g.listedProcs()
}

// listedProcs is v1 Populated by listing cgroup.procs in every hierarchy
// of the group and its children.
func (g *Group) listedProcs() (bool, error) {
	for i := range g.dirs {
		dirs, err := g.treeDirs(i)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return false, err
		}
		for _, sd := range dirs {
			pids, err := readPids(sd + "/cgroup.procs")
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, err
			}
			if len(pids) > 0 {
				return true, nil
			}
		}
	}
	return false, nil
}

// WaitEmpty kills the group's processes and waits up to timeout until none
// is left, re-killing periodically (a process that was in the middle of
// fork when the kill started may have escaped the first round). It returns
// ErrBusy when processes remain.
func (g *Group) WaitEmpty(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	lastKill := time.Time{}
	sleep := 100 * time.Microsecond
	for {
		pop, err := g.Populated()
		if err != nil {
			return err
		}
		if !pop {
			return nil
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("%w: %s still has processes after %v", ErrBusy, g.Path(), timeout)
		}
		if now.Sub(lastKill) > 100*time.Millisecond {
			if err := g.kill(); err != nil {
				return err
			}
			lastKill = now
		}
		time.Sleep(sleep)
		sleep = min(sleep*2, 20*time.Millisecond)
	}
}

// Stats reads the group's measurements (its children included).
//
// v2: memory.peak (memory.current before Linux 5.19), memory.events
// oom_kill, pids.events max, cpu.stat usage_usec. v1: memory.memsw.
// max_usage_in_bytes (memory.max_usage_in_bytes without swap accounting),
// oom_kill of memory.oom_control and max of pids.events summed over the
// subtree (v1 counts these only in the victim's own cgroup), cpuacct.usage.
// A value the kernel does not provide reads as zero.
func (g *Group) Stats() (Stats, error) {
	g.mu.Lock()
	removed := g.removed
	g.mu.Unlock()
	if removed {
		return Stats{}, ErrRemoved
	}
	h := g.host
	var s Stats
	var err error
	if h.version == 2 {
		d := g.dirs[0]
		if h.mem >= 0 {
			if s.MemoryPeak, err = readIntOpt(d + "/memory.peak"); err == nil && s.MemoryPeak == 0 {
				s.MemoryPeak, err = readIntOpt(d + "/memory.current")
			}
			if err != nil {
				return s, err
			}
			if s.OOMKills, err = readKeyOpt(d+"/memory.events", "oom_kill"); err != nil {
				return s, err
			}
		}
		if h.pids >= 0 {
			// Older kernels (Debian's 6.1, test/hosts) count a refused fork
			// only in the forking task's own cgroup (a block's), not in the
			// one whose pids.max refused it (the run's); newer ones (6.12)
			// count it in the run's. Summing the tree only when the group's
			// own count is zero is right on both.
			if s.PidsMax, err = readKeyOpt(d+"/pids.events", "max"); err == nil && s.PidsMax == 0 {
				s.PidsMax, err = g.sumTree(0, "/pids.events", "max")
			}
			if err != nil {
				return s, err
			}
		}
		us, err := readKeyOpt(d+"/cpu.stat", "usage_usec")
		if err != nil {
			return s, err
		}
		s.CPU = time.Duration(us) * time.Microsecond
		return s, nil
	}
	if h.mem >= 0 {
		d := g.dirs[h.mem]
		f := "/memory.max_usage_in_bytes"
		if h.memsw {
			f = "/memory.memsw.max_usage_in_bytes"
		}
		if s.MemoryPeak, err = readIntOpt(d + f); err != nil {
			return s, err
		}
		if s.OOMKills, err = g.sumTree(h.mem, "/memory.oom_control", "oom_kill"); err != nil {
			return s, err
		}
	}
	if h.pids >= 0 {
		if s.PidsMax, err = g.sumTree(h.pids, "/pids.events", "max"); err != nil {
			return s, err
		}
	}
	if h.cpuacct >= 0 {
		ns, err := readIntOpt(g.dirs[h.cpuacct] + "/cpuacct.usage")
		if err != nil {
			return s, err
		}
		s.CPU = time.Duration(ns)
	}
	return s, nil
}

// Remove kills what is left in the group, waits (at most 2 s) until it is
// empty, and removes its directories and those of its children in every
// hierarchy. It is idempotent; after ErrBusy it may be retried.
func (g *Group) Remove() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil
	}
	deadline := time.Now().Add(removeTimeout)
	if err := g.WaitEmpty(removeTimeout); err != nil {
		return err
	}
	if err := g.rmdirAllUntil(deadline); err != nil {
		return err
	}
	g.markRemoved()
	return nil
}

// markRemoved closes fds of the group and its (already rmdir'ed) children.
// Called with g.mu held.
func (g *Group) markRemoved() {
	g.removed = true
	if g.fd >= 0 {
		_ = unix.Close(g.fd)
		g.fd = -1
	}
	g.kidsMu.Lock()
	children := g.children
	g.children = nil
	g.kidsMu.Unlock()
	for _, c := range children {
		c.mu.Lock()
		if !c.removed {
			c.markRemoved()
		}
		c.mu.Unlock()
	}
}

// rmdirAll is the cleanup for a group that never held processes.
func (g *Group) rmdirAll() { _ = g.rmdirAllUntil(time.Now().Add(removeTimeout)) }

// rmdirAllUntil removes the subtree deepest first in every hierarchy. The
// kernel can report EBUSY briefly after the last task left (exit is not
// fully finished), so it retries until deadline.
func (g *Group) rmdirAllUntil(deadline time.Time) error {
	for i := range g.dirs {
		dirs, err := g.treeDirs(i)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, sd := range slices.Backward(dirs) {
			sleep := 100 * time.Microsecond
			for {
				err := unix.Rmdir(sd)
				if err == nil || err == unix.ENOENT {
					break
				}
				if err != unix.EBUSY || time.Now().After(deadline) {
					if err == unix.EBUSY {
						return fmt.Errorf("%w: rmdir %s: %v", ErrBusy, sd, err)
					}
					return &fs.PathError{Op: "rmdir", Path: sd, Err: err}
				}
				time.Sleep(sleep)
				sleep = min(sleep*2, 20*time.Millisecond)
			}
		}
	}
	return nil
}

func (g *Group) kids() []*Group {
	g.kidsMu.Lock()
	defer g.kidsMu.Unlock()
	return slices.Clone(g.children)
}

// treeDirs returns the directories of g's subtree in hierarchy hi, parents
// before children. It is the tracked tree (g and the children made with
// NewChild) when every directory's link count proves there is nothing else
// below it — cgroupfs gives a directory 2 + its number of subdirectories
// links, so one stat per directory replaces an open, two getdents and a
// close — and otherwise (a sub-cgroup made by someone else, e.g. an
// operator) a full directory walk.
func (g *Group) treeDirs(hi int) ([]string, error) {
	var out []string
	var walk func(c *Group) (bool, error)
	if g.dirs[hi] == "" {
		return nil, nil // an accounting child: nothing of its own in this hierarchy
	}
	walk = func(c *Group) (bool, error) {
		var st unix.Stat_t
		if err := unix.Stat(c.dirs[hi], &st); err != nil {
			return false, &fs.PathError{Op: "stat", Path: c.dirs[hi], Err: err}
		}
		kids := slices.DeleteFunc(c.kids(), func(k *Group) bool { return k.dirs[hi] == "" })
		if uint64(st.Nlink) != uint64(2+len(kids)) {
			return false, nil
		}
		out = append(out, c.dirs[hi])
		for _, k := range kids {
			if ok, err := walk(k); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	}
	ok, err := walk(g)
	if ok && err == nil {
		return out, nil
	}
	if err != nil && len(out) == 0 {
		return nil, err // g itself: gone (fs.ErrNotExist) or unreadable
	}
	return subtreeDirs(g.dirs[hi])
}

// subtreeDirs returns dir and all cgroup directories below it, parents
// before children.
func subtreeDirs(dir string) ([]string, error) {
	out := []string{dir}
	for i := 0; i < len(out); i++ {
		names, err := subdirs(out[i])
		if err != nil {
			if i > 0 && errors.Is(err, fs.ErrNotExist) {
				continue // removed concurrently
			}
			return nil, err
		}
		for _, n := range names {
			out = append(out, out[i]+"/"+n)
		}
	}
	return out, nil
}

// sumTree sums key of file over g and the children made with NewChild in
// hierarchy hi. Tracked children are used instead of a directory walk: it
// halves the cost of Stats on v1, and sandboxed code cannot create cgroups.
func (g *Group) sumTree(hi int, file, key string) (int64, error) {
	sum, err := readKeyOpt(g.dirs[hi]+file, key)
	if err != nil {
		return 0, err
	}
	for _, c := range g.kids() {
		v, err := c.sumTree(hi, file, key)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// writeFile writes val to a cgroup interface file in one write(2), which is
// what the kernel parses; errors carry the errno (EBUSY, EINVAL, ...).
func writeFile(path, val string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	_, err = unix.Write(fd, []byte(val))
	cerr := unix.Close(fd)
	if err != nil {
		return &fs.PathError{Op: "write " + strconv.Quote(val), Path: path, Err: err}
	}
	if cerr != nil {
		return &fs.PathError{Op: "close", Path: path, Err: cerr}
	}
	return nil
}

// writeOptional is writeFile for files that older kernels lack.
func writeOptional(path, val string) (present bool, err error) {
	err = writeFile(path, val)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return true, err
}

func readIntOpt(path string) (int64, error) {
	b, err := readSmall(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup: parsing %s: %w", path, err)
	}
	return v, nil
}

// readKey reads "key value" from a flat-keyed file (memory.events, cpu.stat).
func readKey(path, key string) (int64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cgroup: parsing %s %s: %w", path, key, err)
			}
			return n, nil
		}
	}
	return 0, nil
}

func readKeyOpt(path, key string) (int64, error) {
	v, err := readKey(path, key)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	return v, err
}

func readPids(path string) ([]int, error) {
	b, err := readSmall(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup: parsing %s: %w", path, err)
		}
		out = append(out, n)
	}
	return out, nil
}
