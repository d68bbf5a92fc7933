package testhelp

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Nobody is the uid and gid RunAsNobody runs as.
const Nobody = 65534

// RunAsNobody runs this test binary's tests matching pattern as uid and gid 65534 with no supplementary
// groups, and returns their combined output. The binary is copied into a fresh 0755 directory first (the
// go test build directory is not executable by that uid) and removed afterwards; the child runs in / with
// only TMPDIR, HOME and PATH set plus childEnv (KEY=VALUE, how the child test knows it is the child). A
// child still running after 3 minutes is killed: a hang detector, not a timed assertion.
func RunAsNobody(t testing.TB, pattern string, childEnv ...string) (string, error) {
	t.Helper()
	dir, err := os.MkdirTemp("", "codellm-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := copyTestBinary(t, dir)
	cmd := exec.Command(bin, "-test.run", pattern, "-test.v", "-test.count=1")
	cmd.Env = append([]string{"TMPDIR=/tmp", "HOME=/tmp", "PATH=/usr/bin:/bin"}, childEnv...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: Nobody, Gid: Nobody, Groups: []uint32{}}}
	timer := time.AfterFunc(3*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// copyTestBinary copies the running test binary into dir, mode 0755, and returns the copy's path.
func copyTestBinary(t testing.TB, dir string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(exe))
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
