//go:build linux

package scratch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// diskDir is a fresh directory on a disk filesystem (the package's own directory is in the checkout).
func diskDir(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	wd, _ := os.Getwd()
	dir, err := os.MkdirTemp(wd, ".scratch-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if isMemoryFS(t, dir) {
		t.Skip("the checkout is on a memory filesystem")
	}
	return dir
}

func isMemoryFS(t *testing.T, dir string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}

func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

func TestOpenMountsAPrivateTmpfsAndCloseRemovesIt(t *testing.T) {
	root := diskDir(t)
	d, err := Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Mounted() || filepath.Dir(d.Path) != root || !isMemoryFS(t, d.Path) {
		t.Fatalf("Open(%s) = %+v: want a tmpfs below the work root", root, d)
	}
	st, err := os.Stat(d.Path)
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("scratch dir mode: %v %v, want 0755 (the sandbox user traverses it)", st.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(d.Path, "x"), []byte("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Path); !os.IsNotExist(err) || mounted(t, d.Path) {
		t.Fatalf("after Close: stat %v, mounted %v", err, mounted(t, d.Path))
	}
}

func TestOpenOnTmpfsUsesTheWorkRoot(t *testing.T) {
	root := t.TempDir()
	if !isMemoryFS(t, root) {
		if os.Geteuid() != 0 {
			t.Skip("needs a tmpfs work root or root to make one")
		}
		if err := unix.Mount("t", root, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	}
	d, err := Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Mounted() || d.Path != root {
		t.Fatalf("Open on a tmpfs work root: %+v, want the work root itself", d)
	}
}

// A crashed codellm's scratch mount (its process gone) is removed by the next Open; one whose lock is
// held, or whose live process has not locked it yet, stays.
func TestOpenSweepsOnlyDeadScratchMounts(t *testing.T) {
	root := diskDir(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(root, prefix+strconv.Itoa(gone.Process.Pid))
	if err := os.Mkdir(dead, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("t", dead, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dead, lockName), nil, 0o600)
	// pid 1 lives: one directory whose lock this test holds, one without a lock yet (still starting).
	busy := filepath.Join(root, prefix+"1")
	os.Mkdir(busy, 0o755)
	lock, err := os.OpenFile(filepath.Join(busy, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	d, err := Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := os.Stat(dead); !os.IsNotExist(err) || mounted(t, dead) {
		t.Errorf("dead codellm's scratch: stat %v, mounted %v; want removed", err, mounted(t, dead))
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("live, locked scratch removed: %v", err)
	}
	lock.Close() // the lock is free now, but pid 1 lives and its lock file says it is a reused pid: stale
	d2, err := Open(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	d2.Close()
	if _, err := os.Stat(busy); !os.IsNotExist(err) {
		t.Errorf("scratch with a free lock kept: %v", err)
	}
}
