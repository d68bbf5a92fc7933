//go:build linux

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/codellm/codellm/internal/sandbox/landlock"
	"github.com/codellm/codellm/internal/sandbox/mount"
	"github.com/codellm/codellm/internal/sandbox/seccomp"
	"golang.org/x/sys/unix"
)

// init turns any binary importing this package into the sandbox helper when
// it is started with the hidden marker. Running from init (rather than only
// from an explicit call in main) means no binary — codellm, a test binary,
// a tool — can forget the hook; LockOSThread in init also pins the main
// goroutine to the main thread, whose per-thread state (capabilities,
// no_new_privs, Landlock, seccomp) is what execve passes on.
func init() {
	if isHelper() {
		runtime.LockOSThread()
		helperMain()
	}
}

// Main runs the sandbox helper if this process was started as one, and
// never returns in that case; otherwise it returns at once. The package's
// init already does this, so calling Main first thing in main (or TestMain)
// only documents the contract; it is idempotent.
func Main() {
	if isHelper() {
		runtime.LockOSThread()
		helperMain()
	}
}

func isHelper() bool { return len(os.Args) == 2 && os.Args[1] == helperMarker }

// helperMain confines the process step by step, each step only possible
// before the next (mounts need capabilities, Landlock must see the final
// paths, capabilities go before seccomp, seccomp is last), then execs.
func helperMain() {
	status := os.NewFile(statusFD, "status")
	fail := func(mech mechSet, format string, a ...any) {
		e := helperError{Mechanism: mechName(mech), Reason: fmt.Sprintf(format, a...), Fix: mechFix(mech)}
		b, _ := json.Marshal(e)
		_, _ = status.Write(b)
		os.Exit(125)
	}
	if _, err := unix.FcntlInt(statusFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		os.Exit(126) // no status channel: the parent sees EOF without startedByte
	}
	_, _ = unix.FcntlInt(dirFD, unix.F_SETFD, unix.FD_CLOEXEC)
	// Non-dumpable first: while the helper still holds capabilities nothing
	// else in the namespace may ptrace it or open its /proc/<pid>/mem.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fail(mHelper, "set non-dumpable: %v", err)
	}
	var sp helperSpec
	specFile := os.NewFile(specFD, "spec")
	if err := json.NewDecoder(io.LimitReader(specFile, 16<<20)).Decode(&sp); err != nil {
		fail(mHelper, "read spec from the server: %v", err)
	}
	specFile.Close()

	if sp.Mech.has(mCgroupNS) {
		// After the spec was read the server has placed us in the run's
		// cgroup, so the namespace is rooted there.
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			fail(mCgroupNS, "unshare cgroup namespace: %v", err)
		}
	}
	if sp.Mech.has(mRootFS) {
		err := mount.Setup(mount.Options{
			Dir: sp.Dir, DirFD: dirFD, DirIsTree: sp.DirIsTree, Persist: sp.Persist, TmpSize: sp.TmpSize,
			Passwd:  []byte(fmt.Sprintf("root:x:0:0:root:/:/usr/sbin/nologin\n%s:x:%d:%d:codellm sandbox:%s:/bin/sh\nnobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n", sandboxUser, sandboxUID, sandboxGID, sp.Dir)),
			Group:   []byte(fmt.Sprintf("root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", sandboxUser, sandboxGID)),
			Hosts:   []byte("127.0.0.1\tlocalhost " + sandboxHost + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
			Staging: "/tmp",
			Network: sp.Network,
		})
		if err != nil {
			if errors.Is(err, mount.ErrWorkdirTooLarge) {
				fail(mRootFS, "%v", err)
			}
			fail(mRootFS, "build root filesystem: %v", err)
		}
	}
	if sp.Mech.has(mUTSNS) {
		if err := unix.Sethostname([]byte(sandboxHost)); err != nil {
			fail(mUTSNS, "sethostname: %v", err)
		}
		_ = unix.Setdomainname([]byte("(none)"))
	}
	if sp.Mech.has(mRootFS) {
		if err := unix.Chdir(sp.Dir); err != nil {
			fail(mRootFS, "chdir to workdir %s: %v", sp.Dir, err)
		}
	} else if err := unix.Fchdir(dirFD); err != nil {
		fail(mHelper, "chdir to workdir %s: %v", sp.Dir, err)
	}
	if sp.Mech.has(mRlimit) {
		if err := applyRlimits(&sp); err != nil {
			fail(mRlimit, "%v", err)
		}
	}
	// no_new_privs before Landlock and seccomp (both need it without
	// CAP_SYS_ADMIN) and before exec (setuid binaries grant nothing).
	if sp.Mech.has(mNoNewPrivs) {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			fail(mNoNewPrivs, "prctl(PR_SET_NO_NEW_PRIVS): %v", err)
		}
	}
	if sp.Mech.has(mLandlock) {
		pol := landlock.Policy{
			ReadExec:  append(append([]string{}, mount.SystemDirs...), "/etc"),
			ReadOnly:  []string{"/proc"},
			ReadWrite: []string{sp.Dir, "/tmp", "/dev/shm"},
			RWFiles:   []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"},
			ListRoot:  true,
			DenyTCP:   !sp.Network,
			Scope:     true,
		}
		if !sp.Mech.has(mRootFS) {
			// Without a private root, /tmp and /dev/shm are the host's:
			// only the workdir may be written. It is named through the
			// inherited descriptor because our uid may not be allowed to
			// traverse its host parents.
			pol.ReadWrite = []string{"/proc/self/fd/" + strconv.Itoa(dirFD)}
		}
		if _, err := landlock.Restrict(pol); err != nil {
			fail(mLandlock, "%v", err)
		}
	}
	unix.Close(dirFD)
	if sp.Mech.has(mCaps) {
		if err := dropCapabilities(); err != nil {
			fail(mCaps, "%v", err)
		}
	}
	// Every descriptor but stdio and the status pipe must be closed in the
	// program; the Go runtime's own are close-on-exec already, this covers
	// anything inherited by mistake.
	_ = unix.CloseRange(dirFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if sp.Mech.has(mSeccomp) {
		if err := seccomp.Install(); err != nil {
			fail(mSeccomp, "cannot install filter: %v", err)
		}
	}
	if sp.ProbeOnly {
		_, _ = status.Write([]byte{startedByte})
		os.Exit(0)
	}
	if _, err := status.Write([]byte{startedByte}); err != nil {
		os.Exit(126)
	}
	err := syscall.Exec(sp.Path, sp.Args, sp.Env)
	b, _ := json.Marshal(helperError{Mechanism: "exec", Reason: fmt.Sprintf("%s: %v", sp.Path, err),
		Fix: "the program must exist inside the sandbox (under /usr, /bin, /sbin or /lib*) and be executable"})
	_, _ = status.Write(b)
	os.Exit(127)
}

func applyRlimits(sp *helperSpec) error {
	set := func(name string, res int, v uint64) error {
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %w", name, v, err)
		}
		return nil
	}
	if err := set("CORE", unix.RLIMIT_CORE, 0); err != nil {
		return err
	}
	if sp.FileSize > 0 {
		if err := set("FSIZE", unix.RLIMIT_FSIZE, uint64(sp.FileSize)); err != nil {
			return err
		}
	}
	if sp.OpenFiles > 0 {
		if err := set("NOFILE", unix.RLIMIT_NOFILE, uint64(sp.OpenFiles)); err != nil {
			return err
		}
	}
	if sp.CPUSeconds > 0 {
		// soft == hard: the kernel's SIGXCPU at the soft limit would be
		// ignored by a PID-namespace init; at the hard limit it sends a
		// SIGKILL that even init cannot ignore.
		if err := set("CPU", unix.RLIMIT_CPU, sp.CPUSeconds); err != nil {
			return err
		}
	}
	return nil
}

// dropCapabilities empties the bounding, ambient, inheritable, permitted and
// effective sets of the calling thread (the one that execs).
func dropCapabilities() error {
	last := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &last)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("drop bounding capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if _, _, e := unix.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	return nil
}
