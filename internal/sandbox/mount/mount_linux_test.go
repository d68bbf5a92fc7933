package mount

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCopyTree: the non-persistent workdir copy keeps files, modes,
// directories and symlinks (as links, unresolved), and skips other types.
func TestCopyTree(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(src, "run.py"), []byte("print(1)\n"), 0o640))
	must(os.MkdirAll(filepath.Join(src, "tmp", "deep"), 0o700))
	must(os.WriteFile(filepath.Join(src, "tmp", "deep", "f"), []byte("deep"), 0o600))
	must(os.Symlink("/etc/shadow", filepath.Join(src, "link")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(err)
	defer unix.Close(fd)
	must(copyTree(fd, dst, 0))

	if b, err := os.ReadFile(filepath.Join(dst, "run.py")); err != nil || string(b) != "print(1)\n" {
		t.Fatalf("run.py: %q %v", b, err)
	}
	if st, _ := os.Stat(filepath.Join(dst, "run.py")); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", st.Mode().Perm())
	}
	if b, err := os.ReadFile(filepath.Join(dst, "tmp", "deep", "f")); err != nil || string(b) != "deep" {
		t.Fatalf("deep file: %q %v", b, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "/etc/shadow" {
		t.Fatalf("symlink: %q %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !os.IsNotExist(err) {
		t.Fatalf("fifo copied: %v", err)
	}
	// The caller's descriptor is still usable (copyTree reads a duplicate).
	var st unix.Stat_t
	must(unix.Fstat(fd, &st))
}
