//go:build linux

package sandbox

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// processHelper is the sealed copy of this process's executable that every
// Sandbox of the process execs as its helper, made on first use and kept
// for the process's life. One copy serves them all: it is sealed, so no
// Sandbox (or block) can change what another execs, and a copy per Sandbox
// cost each New a copy of the whole binary (22 MB here, ~15 ms) that its
// Close could not give back while a Run of it might still exec the path.
var processHelper = sync.OnceValues(func() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	path, fd, err := sealedExecutable(exe)
	if err == nil {
		helperFile = os.NewFile(uintptr(fd), "codellm-sandbox-helper")
	}
	return path, err
})

// helperFile is the descriptor behind processHelper's path, handed to each
// Sandbox's spawner (which execs its own copy of it). Set once, with
// processHelper, and never closed: the path must stay valid for the process.
var helperFile *os.File

// sealedExecutable copies codellm's own binary into a sealed memfd and
// returns a path that execs it ("/proc/self/fd/N", N a high descriptor kept
// open for the Sandbox's lifetime).
//
// Why not exec os.Executable() directly:
//   - the helper execs after dropping to the unprivileged sandbox uid, which
//     may not be allowed to traverse the binary's directory (go test builds
//     into a 0700 directory; operators install wherever they like);
//   - a sealed in-memory copy cannot be written through /proc/<pid>/exe by
//     anything in the sandbox, whatever the on-disk binary's permissions
//     (the class of attack behind runc's CVE-2019-5736).
func sealedExecutable(exe string) (path string, fd int, err error) {
	src, err := os.Open(exe)
	if err != nil {
		return "", -1, err
	}
	defer src.Close()
	const mfdExec = 0x10 // MFD_EXEC (6.3+): executable despite vm.memfd_noexec
	mfd, err := unix.MemfdCreate("codellm-sandbox-helper", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|mfdExec)
	if err != nil {
		mfd, err = unix.MemfdCreate("codellm-sandbox-helper", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return "", -1, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(mfd), "memfd")
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return "", -1, fmt.Errorf("copy executable: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS,
		unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK); err != nil {
		f.Close()
		return "", -1, fmt.Errorf("seal executable: %w", err)
	}
	// A high number so os.StartProcess never dup2()s a child's stdio or
	// ExtraFiles over it before execve resolves the path.
	high, err := unix.FcntlInt(uintptr(mfd), unix.F_DUPFD_CLOEXEC, 200)
	f.Close()
	if err != nil {
		return "", -1, fmt.Errorf("dup executable fd: %w", err)
	}
	return "/proc/self/fd/" + strconv.Itoa(high), high, nil
}
