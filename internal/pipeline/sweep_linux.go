//go:build linux

package pipeline

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// runOwnerName is the file in each run directory naming the process that owns it ("pid starttime"), so
// that a later process can tell a crashed server's leftover workdirs (the blocks' code and the delivery
// bag) from a live run's. The start time (field 22 of /proc/PID/stat) defeats PID reuse, and no
// descriptor is held for the run's lifetime.
const runOwnerName = ".owner"

var selfOwner = func() string {
	st, err := procStart(os.Getpid())
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d %d", os.Getpid(), st)
}()

// markRunDir records this process as dir's owner.
func markRunDir(dir string) error {
	if selfOwner == "" {
		return nil // no /proc: nothing can be swept, nothing to mark
	}
	return os.WriteFile(filepath.Join(dir, runOwnerName), []byte(selfOwner), 0o600)
}

// procStart is the start time of pid in clock ticks since boot.
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// comm (field 2) may contain spaces and parentheses: the fields after it follow the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64) // field 22 overall
}

// ownerAlive reports whether the "pid starttime" in a run directory's owner file names a live process.
func ownerAlive(owner string) bool {
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(owner, "%d %d", &pid, &start); err != nil || pid <= 0 {
		return true // unreadable: keep the directory rather than guess
	}
	st, err := procStart(pid)
	return err == nil && st == start
}

// SweepStale removes the run directories of dead processes under root ("" = the system temp dir):
// codellm-run-* directories whose owner file names a process that no longer exists. A directory without
// an owner file (a run between creating and marking it) or with a live owner (this or another server) is
// left alone. Servers call it once at start; errors are for the log, never fatal.
func SweepStale(root string) (removed []string, errs []error) {
	if root == "" {
		root = os.TempDir()
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, []error{err}
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "codellm-run-") || !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		owner, err := os.ReadFile(filepath.Join(dir, runOwnerName))
		if err != nil || ownerAlive(string(owner)) {
			continue
		}
		(&run{runDir: dir}).removeRunDir()
		if _, err := os.Lstat(dir); err == nil {
			errs = append(errs, &os.PathError{Op: "sweep", Path: dir, Err: os.ErrExist})
		} else {
			removed = append(removed, dir)
		}
	}
	return removed, errs
}
