package runner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/sandbox/hook"
)

// lockName is the file each live runner holds an exclusive flock on, inside its own directory. The
// kernel drops the lock when the process dies, however it dies, which is what lets a later runner tell a
// crashed runner's leftovers (workspaces with users' files, tmpfs mounts) from a live runner's.
const lockName = ".lock"

// lockDir creates and locks dir/.lock. The lock is taken on a temporary name that is then renamed into
// place, so a sweeper never sees an unlocked .lock of a live runner.
func lockDir(dir string) (*os.File, error) {
	tmp := filepath.Join(dir, ".lock-new")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, lockName)); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweepStale removes the directories of dead runners under root: codellm-runner-* directories whose
// .lock exists and is not locked. Directories without a .lock are left alone (a runner between MkdirTemp
// and lockDir, or one from before locks existed). Errors are logged by the caller, never fatal.
func sweepStale(root, self string) (removed []string, errs []error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, []error{err}
	}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !strings.HasPrefix(e.Name(), "codellm-runner-") || !e.IsDir() || dir == self {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close() // held: a live runner
			continue
		}
		if err := detachMountsUnder(dir); err != nil {
			errs = append(errs, err)
		} else if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, dir)
		}
		f.Close()
	}
	return removed, errs
}

// detachMountsUnder unmounts every mount below dir (workspace tmpfs of a crashed runner), deepest first,
// so that RemoveAll never deletes through a mount point.
func detachMountsUnder(dir string) error {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, mp := range hook.ParseMountPoints(raw) {
		if strings.HasPrefix(mp, dir+"/") {
			points = append(points, mp)
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	return nil
}
