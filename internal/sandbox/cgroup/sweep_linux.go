package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// SweepStale removes run groups that earlier processes left behind below
// the run-group parent (Info().Path on v2; the same directory in every
// controller's hierarchy on v1) and returns how many it removed.
//
// Why: a run group is removed when its run closes, but a codellm process
// that crashes or is SIGKILLed never closes its runs, and nothing else ever
// removes its groups; they accumulate forever (each costs kernel memory,
// per-CPU counters for memory cgroups). Callers sweep once at startup.
//
// stale decides, from the directory name alone, whether a group belongs to
// a process that no longer exists; it is called once per distinct name and
// must return false for anything it did not create. A group is removed only
// when stale says so AND neither it nor any descendant holds a process in
// any hierarchy. Its descendants are removed before it, deepest first.
// Symlinks and non-directories are ignored, nothing is killed or moved,
// rmdir is never retried: the kernel refuses to remove a cgroup that holds
// a process or has children, so a process moved in after the check keeps
// the group alive rather than being disturbed.
//
// Errors do not stop the sweep; they are joined and returned with the count
// of groups that were fully removed. The sweep is hygiene, not protection:
// callers should log the error and carry on.
func (h *Host) SweepStale(stale func(name string) bool) (removed int, err error) {
	if h.err != nil {
		return 0, h.err
	}
	names, dirs, errs := h.groupDirs()
	for _, n := range names {
		if ValidateName(n) != nil || !stale(n) {
			continue
		}
		ok, err := sweepGroup(slices.DeleteFunc(slices.Clone(dirs[n]), func(d string) bool { return d == "" }))
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// groupDirs lists the groups below the run-group parent: names in hierarchy order, each with its
// directory per hierarchy (h.hiers' order; "" where the name has none).
func (h *Host) groupDirs() (names []string, dirs map[string][]string, errs []error) {
	dirs = map[string][]string{}
	for i, hr := range h.hiers {
		ents, err := os.ReadDir(hr.base)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			// Type is from getdents (lstat semantics): a symlink is not a dir.
			if !e.Type().IsDir() {
				continue
			}
			n := e.Name()
			if _, ok := dirs[n]; !ok {
				names = append(names, n)
				dirs[n] = make([]string, len(h.hiers))
			}
			dirs[n][i] = hr.base + "/" + n
		}
	}
	return names, dirs, errs
}

// KillStale ends the processes left in stale groups (stale as for SweepStale), so that SweepStale can
// then remove them, and returns how many groups held some. A codellm process killed while it was
// killing a run group on v1 (freeze, kill, thaw) left that group frozen, its processes frozen for good
// (a frozen task takes no SIGKILL, its parent-death signal included), and SweepStale leaves a group
// that holds processes alone (issue 35 item 7). A group whose owner is dead holds only what codellm
// started for that owner, which must not outlive it: each is killed as Group.Kill does (frozen,
// signalled through pidfds, thawed), and waited for up to wait.
func (h *Host) KillStale(stale func(name string) bool, wait time.Duration) (killed int, err error) {
	if h.err != nil {
		return 0, h.err
	}
	names, dirs, errs := h.groupDirs()
	for _, n := range names {
		if ValidateName(n) != nil || !stale(n) {
			continue
		}
		g := &Group{host: h, name: n, fd: -1, dirs: dirs[n], rels: make([]string, len(h.hiers))}
		for i, hr := range h.hiers {
			if g.dirs[i] != "" {
				g.rels[i] = strings.TrimSuffix(hr.rel, "/") + "/" + n
			}
		}
		if pop, err := g.Populated(); err != nil || !pop {
			errs = append(errs, err)
			continue
		}
		killed++
		if err := g.WaitEmpty(wait); err != nil {
			errs = append(errs, err)
		}
	}
	return killed, errors.Join(errs...)
}

// sweepGroup removes the subtrees at dirs (one group in several
// hierarchies) if none of them holds a process. It reports whether all of
// them are gone.
func sweepGroup(dirs []string) (bool, error) {
	trees := make([][]string, 0, len(dirs))
	for _, d := range dirs {
		sub, err := subtreeDirs(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed concurrently
		}
		if err != nil {
			return false, err
		}
		for _, sd := range sub {
			pids, err := readPids(sd + "/cgroup.procs")
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return false, err
			}
			if len(pids) > 0 {
				return false, nil // in use: leave the whole group alone
			}
		}
		trees = append(trees, sub)
	}
	for _, sub := range trees {
		for _, sd := range slices.Backward(sub) {
			if err := unix.Rmdir(sd); err != nil && err != unix.ENOENT {
				return false, fmt.Errorf("cgroup: sweeping stale group: %w", &fs.PathError{Op: "rmdir", Path: sd, Err: err})
			}
		}
	}
	return true, nil
}
