package testhelp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/sandbox/hook"
)

// RemoveWorkDir removes dir, a work directory a test's `codellm serve` or worker used: it first detaches
// every mount at or below it (the runner's workspace tmpfs, deepest first), then removes the tree. A
// failure fails the test.
//
// Why: a server stopped with SIGKILL (a test's fallback, or a test that fails half-way) leaves its session
// and run workspace tmpfs mounted on the host, and os.RemoveAll alone deletes the files inside them and
// then fails, silently in a cleanup, on the mount points. The mounts then stay until reboot, and they cost:
// every sandbox clones the host mount namespace and detaches what it does not need, so each leaked mount
// makes every block slower (200 of them: ~7% more CPU per request). A restarted server only sweeps its own
// work dir, and tests use a fresh temporary one each time.
func RemoveWorkDir(t testing.TB, dir string) {
	t.Helper()
	if err := removeWorkDir(dir); err != nil {
		t.Errorf("remove the work dir %s: %v", dir, err)
	}
}

// removeWorkDir is RemoveWorkDir returning its error.
func removeWorkDir(dir string) error {
	if err := DetachMountsUnder(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// DetachMountsUnder lazily unmounts (MNT_DETACH, never following a symlink) every mount whose mount point
// is dir or below it, deepest first and the top of a stack first, until /proc/self/mountinfo lists none.
// A mount that is already gone (EINVAL, ENOENT: detached with its parent, or by its server meanwhile)
// counts as done.
func DetachMountsUnder(dir string) error {
	for range 8 { // a stack of mounts on one point goes one per pass at worst; bounded all the same
		points, err := mountsUnder(dir)
		if err != nil || len(points) == 0 {
			return err
		}
		for _, p := range points {
			err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("detach %s: %w", p, err)
			}
		}
	}
	points, err := mountsUnder(dir)
	if err == nil && len(points) > 0 {
		err = fmt.Errorf("still mounted after detaching: %v", points)
	}
	return err
}

// MountsUnder lists the mount points at or below dir that /proc/self/mountinfo shows, deepest first (one
// entry per mount, so a stacked point appears more than once). A test asserts it is empty after stopping
// a server to show the server cleaned up after itself.
func MountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	points, err := mountsUnder(dir)
	if err != nil {
		t.Fatal(err)
	}
	return points
}

// mountsUnder is MountsUnder returning its error. dir is made absolute and its symlinks resolved, as the
// kernel reports mount points (/tmp may be a link).
func mountsUnder(dir string) ([]string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if dir == "/" {
		return nil, errors.New("refusing to list or detach every mount of the host (dir is /)")
	}
	all, err := mountPoints()
	if err != nil {
		return nil, err
	}
	var out []string
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for _, p := range all {
		if p == dir || strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	// Deepest first; on one point the later mount (the top of the stack) first.
	slices.Reverse(out)
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out, nil
}

// mountPoints returns the mount point (field 5) of every line of /proc/self/mountinfo, in its order.
func mountPoints() ([]string, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return hook.ParseMountPoints(raw), nil
}
