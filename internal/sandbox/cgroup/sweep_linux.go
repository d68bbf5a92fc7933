package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

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
	var errs []error
	// Names in hierarchy order, each with its directory per hierarchy.
	var names []string
	dirs := map[string][]string{}
	for _, hr := range h.hiers {
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
			}
			dirs[n] = append(dirs[n], hr.base+"/"+n)
		}
	}
	for _, n := range names {
		if ValidateName(n) != nil || !stale(n) {
			continue
		}
		ok, err := sweepGroup(dirs[n])
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
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
