//go:build linux

package scratch

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The mount points are prefix + pid, each holding lockName, flocked while its codellm lives.
const (
	prefix   = "codellm-scratch-"
	lockName = ".lock"
)

// Open returns the scratch directory for workRoot ("" is the system temp directory): a fresh private
// tmpfs at <workRoot>/codellm-scratch-<pid> when the work root is on a disk filesystem and the process
// may mount, else workRoot itself. It first removes the scratch mounts of codellm processes that are gone.
func Open(workRoot string, log *slog.Logger) (*Dir, error) {
	if workRoot == "" {
		workRoot = os.TempDir()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(workRoot, &st); err != nil {
		return nil, fmt.Errorf("scratch: work root %s: %w", workRoot, err)
	}
	if st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		return unmounted(workRoot, "", log), nil // memory-backed already
	}
	sweep(workRoot, log)
	if os.Geteuid() != 0 {
		return unmounted(workRoot, "not root: cannot mount a tmpfs", log), nil
	}
	dir := filepath.Join(workRoot, prefix+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("scratch: %w", err)
	}
	limit := size()
	if err := unix.Mount("codellm-scratch", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size="+strconv.FormatInt(limit, 10)); err != nil {
		_ = os.Remove(dir)
		return unmounted(workRoot, "mount tmpfs: "+err.Error(), log), nil
	}
	// Private: the runner's workspace mounts below it do not propagate to the work root's peers.
	_ = unix.Mount("", dir, "", unix.MS_PRIVATE, "")
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		removeMount(dir)
		return nil, fmt.Errorf("scratch: lock %s: %w", dir, err)
	}
	if log != nil {
		log.Info("scratch directories on a private tmpfs", "dir", dir, "max_bytes", limit)
	}
	return &Dir{Path: dir, mounted: true, close: func() error {
		err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		lock.Close()
		if rerr := os.Remove(dir); err == nil {
			err = rerr
		}
		return err
	}}, nil
}

// size caps the tmpfs (it holds only what is stored in it): a quarter of RAM, between 64 MiB and 4 GiB.
// In native mode blocks never write here (each writes to its own private tmpfs); in off mode they work
// in their block directory, and this bounds them.
func size() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 1 << 30
	}
	return min(max(int64(si.Totalram)*int64(si.Unit)/4, 64<<20), 4<<30)
}

// sweep removes the scratch mounts below workRoot whose lock nobody holds: their codellm is gone.
func sweep(workRoot string, log *slog.Logger) {
	ents, err := os.ReadDir(workRoot)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), prefix) || !e.IsDir() {
			continue
		}
		dir := filepath.Join(workRoot, e.Name())
		if !stale(dir, e.Name()[len(prefix):]) {
			continue
		}
		removeMount(dir)
		if log != nil {
			log.Info("removed the scratch tmpfs of a codellm that is gone", "dir", dir)
		}
	}
}

// stale reports whether the scratch mount dir, made by process pid, is left over: its process is gone,
// or its lock exists and nobody holds it (the process died and its pid was reused). A live process whose
// lock is not there yet is still starting.
func stale(dir, pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false // not ours
	}
	if unix.Kill(n, 0) == unix.ESRCH {
		return true
	}
	lock := filepath.Join(dir, lockName)
	if _, err := os.Stat(lock); err != nil {
		return false
	}
	return !held(lock)
}

// held reports whether another process holds the flock on path (a missing file is not held).
func held(path string) bool {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	return errors.Is(err, unix.EWOULDBLOCK)
}

// removeMount detaches dir's mount (with everything mounted below it) and removes the directory.
func removeMount(dir string) {
	_ = unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	_ = os.RemoveAll(dir)
}
