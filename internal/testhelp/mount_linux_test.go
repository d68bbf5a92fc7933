package testhelp

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a small tmpfs on dir, skipping the test where this process may not mount.
func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount("codellm-testhelp", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.Skipf("cannot mount a tmpfs here: %v", err)
		}
		t.Fatal(err)
	}
}

// What a SIGKILLed server leaves: a workspace tmpfs with another nested in it, a mount point whose name
// mountinfo escapes, and two mounts stacked on one point. os.RemoveAll alone fails on them (and the
// mounts stay); RemoveWorkDir detaches all of them and removes the directory.
func TestRemoveWorkDirDetachesNestedMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir, err := os.MkdirTemp("", "codellm-testhelp-mounts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DetachMountsUnder(dir); os.RemoveAll(dir) }) // a safety net if the test fails half-way
	outer := filepath.Join(dir, "sessions", "s 1")
	inner := filepath.Join(outer, "nested")
	stacked := filepath.Join(dir, "runs", "r1")
	for _, d := range []string{outer, stacked} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mountTmpfs(t, outer)
	if err := os.Mkdir(inner, 0o700); err != nil { // inside the outer tmpfs
		t.Fatal(err)
	}
	mountTmpfs(t, inner)
	if err := os.WriteFile(filepath.Join(inner, "user-file"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, stacked)
	mountTmpfs(t, stacked)

	got := MountsUnder(t, dir)
	if len(got) != 4 || got[0] != inner || !slices.Contains(got, outer) || slices.Index(got, outer) < slices.Index(got, inner) {
		t.Fatalf("mounts under %s: %q, want 4 (the nested %q first, the escaped %q found)", dir, got, inner, outer)
	}
	// The failure this helper exists for: RemoveAll stops at the mount points and the mounts stay.
	if err := os.RemoveAll(dir); err == nil {
		t.Fatal("os.RemoveAll removed a directory with tmpfs mounted in it: the test shows nothing")
	}
	if n := len(MountsUnder(t, dir)); n != 4 {
		t.Fatalf("%d mounts after the failed RemoveAll, want all 4 still there", n)
	}

	RemoveWorkDir(t, dir)
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("work dir still there: %v", err)
	}
	if left := MountsUnder(t, dir); len(left) != 0 {
		t.Fatalf("mounts left: %q", left)
	}
}

// Only mounts at or below the directory are touched: a sibling whose name starts the same is not.
func TestMountsUnderIsPrefixSafe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	parent, err := os.MkdirTemp("", "codellm-testhelp-prefix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DetachMountsUnder(parent); os.RemoveAll(parent) })
	dir, sibling := filepath.Join(parent, "work"), filepath.Join(parent, "work-other")
	for _, d := range []string{dir, sibling} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mountTmpfs(t, sibling)
	if got := MountsUnder(t, dir); len(got) != 0 {
		t.Fatalf("mounts under %s: %q, want none (the sibling is not below it)", dir, got)
	}
	RemoveWorkDir(t, dir)
	if got := MountsUnder(t, parent); len(got) != 1 || got[0] != sibling {
		t.Fatalf("the sibling's mount went with %s: %q", dir, got)
	}
}

func TestMountsUnderRefusesRoot(t *testing.T) {
	if _, err := mountsUnder("/"); err == nil {
		t.Fatal("mountsUnder(/) listed the whole host: RemoveWorkDir(/) would detach everything")
	}
}
