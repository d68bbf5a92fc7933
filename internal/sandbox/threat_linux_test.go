package sandbox

// Differential tests of the threat model (categories A–F, single-block
// promises). Each probe prints PROBE-OK when the attack worked; the test
// asserts that it works without the protection (off mode, or native with
// exactly that mechanism switched off) and fails under the default policy.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/testhelp"
)

const probeOK = "PROBE-OK"

// py runs a python probe.
func py(script string) []string { return []string{"/usr/bin/python3", "-c", script} }

func worked(o outcome) bool { return strings.Contains(o.Stdout, probeOK) }

// differential runs argv unprotected and protected and checks the attack
// worked only in the first.
func differential(t *testing.T, unprotected, protected *Sandbox, lim *Limits, argv []string) (off, on outcome) {
	t.Helper()
	var err error
	off, err = runIn(t, unprotected, "", lim, argv...)
	if err != nil {
		t.Fatalf("unprotected start: %v", err)
	}
	if !worked(off) {
		t.Fatalf("probe did not work even without the protection (test is broken): %+v", off)
	}
	on, err = runIn(t, protected, "", lim, argv...)
	if err != nil {
		t.Fatalf("protected start: %v", err)
	}
	if worked(on) {
		t.Fatalf("probe worked under the sandbox: %+v", on)
	}
	return off, on
}

func offSandbox(t *testing.T) *Sandbox { return sandboxFor(t, ModeOff, false) }

// ---------- A. Resource exhaustion ----------

func TestA_ForkBombBoundedByRunPids(t *testing.T) {
	s := nativeSandbox(t)
	lim := &Limits{Pids: 32}
	// Forks 100 sleeping children (a bounded fork bomb: the unprotected
	// run must not hurt the host) and reports how many it got.
	script := `
import os, time
n = 0
for i in range(100):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(1); os._exit(0)
    n += 1
print("forked", n)
if n == 100: print("` + probeOK + `")
`
	_, on := differential(t, offSandbox(t), s, lim, py(script))
	if !strings.Contains(on.Stdout, "forked") {
		t.Fatalf("protected probe output: %+v", on)
	}
	// Threads count too.
	thr := `
import threading, time
n = 0
try:
    for i in range(100):
        threading.Thread(target=time.sleep, args=(1,), daemon=True).start(); n += 1
except RuntimeError:
    pass
print("threads", n)
if n == 100: print("` + probeOK + `")
`
	differential(t, offSandbox(t), s, lim, py(thr))
	// A block that fails because it hit the run's pids limit is reported
	// as such.
	failing := strings.Replace(script, `print("forked", n)`, `print("forked", n)
if n < 100: raise SystemExit(1)`, 1)
	_, on = differential(t, offSandbox(t), s, lim, py(failing))
	if on.ExitCode != 1 || on.Limit != LimitPids || on.LimitDesc != "pids limit 32" {
		t.Fatalf("pids limit not attributed: %+v", on.Result)
	}
}

func TestA_MemoryLimitWholeRun(t *testing.T) {
	s := nativeSandbox(t)
	lim := &Limits{Memory: 96 << 20}
	one := `
b = bytearray(200 << 20)
for i in range(0, len(b), 4096): b[i] = 1
print("` + probeOK + `")
`
	_, on := differential(t, offSandbox(t), s, lim, py(one))
	if on.Limit != LimitMemory || on.LimitDesc != "memory limit 96 MiB" {
		t.Fatalf("single process: limit not attributed: %+v", on.Result)
	}
	// Split across 4 processes of 40 MiB each: each under the limit, the
	// sum over it; the run as a whole is bounded.
	split := `
import os, sys, time
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        b = bytearray(40 << 20)
        for j in range(0, len(b), 4096): b[j] = 1
        time.sleep(1.5)
        os._exit(0)
    kids.append(pid)
ok = True
for pid in kids:
    _, st = os.waitpid(pid, 0)
    if st != 0: ok = False
if ok: print("` + probeOK + `")
else: sys.exit(1)
`
	_, on = differential(t, offSandbox(t), s, lim, py(split))
	if on.Limit != LimitMemory {
		t.Fatalf("split allocation: limit not attributed: %+v", on.Result)
	}
}

func TestA_CPUTimeLimit(t *testing.T) {
	s := nativeSandbox(t)
	lim := &Limits{CPUTime: time.Second}
	script := `
import time
t0 = time.process_time()
while time.process_time() - t0 < 2.0: pass
print("` + probeOK + `")
`
	_, on := differential(t, offSandbox(t), s, lim, py(script))
	if on.Signal != syscall.SIGKILL || on.Limit != LimitCPU || on.LimitDesc != "CPU time limit 1s" {
		t.Fatalf("CPU limit not reported: %+v", on.Result)
	}
}

func TestA_DiskBoundedByTmpSize(t *testing.T) {
	s := nativeSandbox(t)
	lim := &Limits{TmpSize: 8 << 20, FileSize: 1 << 30}
	for _, where := range []string{".", "/tmp", os.Getenv("X_NOT_SET") + "tmp"} {
		t.Run(where, func(t *testing.T) {
			script := fmt.Sprintf(`
import os
with open(os.path.join(%q, "fill"), "wb") as f:
    for i in range(32): f.write(b"x" * (1 << 20))
print("`+probeOK+`")
`, where)
			differential(t, offSandbox(t), s, lim, py(script))
		})
	}
	// fallocate of a huge file.
	fa := `
import os
fd = os.open("big", os.O_CREAT | os.O_WRONLY, 0o600)
os.posix_fallocate(fd, 0, 64 << 20)
print("` + probeOK + `")
`
	differential(t, offSandbox(t), s, lim, py(fa))
}

func TestA_FileSizeLimit(t *testing.T) {
	s := nativeSandbox(t)
	lim := &Limits{FileSize: 1 << 20}
	script := `
with open("f", "wb") as f: f.write(b"x" * (4 << 20))
print("` + probeOK + `")
`
	differential(t, offSandbox(t), s, lim, py(script))
}

func TestA_OpenFilesLimit(t *testing.T) {
	s := nativeSandbox(t)
	lim := &Limits{OpenFiles: 64}
	script := `
import os
fds = []
try:
    for i in range(500): fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print("stopped at", len(fds), e)
if len(fds) == 500: print("` + probeOK + `")
`
	_, on := differential(t, offSandbox(t), s, lim, py(script))
	if !strings.Contains(on.Stdout, "Too many open files") {
		t.Fatalf("want EMFILE: %+v", on)
	}
}

// ---------- B. Process lifetime ----------

// TestB_DaemonDoesNotOutliveBlock: a setsid'ed, double-forked daemon is
// dead when Wait returns in native mode; with only process groups to go by
// (PID namespace and cgroup switched off) it survives. Off mode uses a
// limit-less cgroup where available, so it too kills the daemon then.
func TestB_DaemonDoesNotOutliveBlock(t *testing.T) {
	s := nativeSandbox(t)
	for _, c := range []struct {
		name    string
		sb      *Sandbox
		survive bool
	}{
		{"process-group-only", withDisabled(s, MechPIDNS, MechCgroup, MechCgroupNS), true},
		{"native", s, false},
		{"off-with-cgroup", offSandbox(t), false},
	} {
		if c.name == "off-with-cgroup" && (c.sb.plat.cg == nil || c.sb.plat.cg.Info().Version != 2) {
			// v1 has no CLONE_INTO_CGROUP: an unconfined program joins its
			// group just after it starts and may fork first (off mode is
			// best effort); only v2 makes this deterministic.
			t.Logf("off mode on cgroup v1: daemon kill is best effort, not asserted")
			continue
		}
		tag := fmt.Sprintf("300.%d", time.Now().UnixNano()%1e9)
		o := mustRun(t, c.sb, sh("(setsid sleep "+tag+" </dev/null >/dev/null 2>&1 &); sleep 0.2; echo done")...)
		if o.ExitCode != 0 {
			t.Fatalf("%s: %+v", c.name, o)
		}
		pids := testhelp.CmdlinePIDs(t, tag)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // clean up the surviving daemon
		}
		if got := len(pids) > 0; got != c.survive {
			t.Fatalf("%s: daemon survived = %v, want %v", c.name, got, c.survive)
		}
	}
}

// ---------- C. Privilege and kernel attack surface ----------

func TestC_ProcSelfStatus(t *testing.T) {
	s := nativeSandbox(t)
	script := `
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
weak = st["NoNewPrivs"].strip() != "1" or int(st["CapEff"].strip(), 16) != 0 or st["Seccomp"].strip() != "2"
print(st["NoNewPrivs"].strip(), st["CapEff"].strip(), st["Seccomp"].strip())
if weak: print("` + probeOK + `")
`
	_, on := differential(t, offSandbox(t), s, nil, py(script))
	if strings.TrimSpace(on.Stdout) != "1 0000000000000000 2" {
		t.Fatalf("status = %q", on.Stdout)
	}
}

func TestC_NotHostRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the unprivileged side of this test needs codellm running as root")
	}
	s := nativeSandbox(t)
	dir := workdir(t, nil)
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	p, err := r.Start(Spec{Path: "/bin/sleep", Args: []string{"sleep", "5"}, Dir: dir, Stdout: null, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	p.Kill()
	p.Wait()
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Uid:") {
			f := strings.Fields(l)
			if f[1] == "0" || f[2] == "0" {
				t.Fatalf("block runs as host root: %q", l)
			}
			if f[1] != strconv.Itoa(s.Config().HostUID) {
				t.Fatalf("host uid %s, want %d", f[1], s.Config().HostUID)
			}
			return
		}
	}
	t.Fatalf("no Uid line in %q", b)
}

// syscallProbe calls one raw syscall through ctypes and prints PROBE-OK if
// it succeeded (or failed with an errno other than EPERM/ENOSYS, i.e. the
// kernel reached the real implementation).
func syscallProbe(setup, call string) []string {
	return py(`
import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
` + setup + `
r = ` + call + `
e = ctypes.get_errno()
print("ret", r, errno.errorcode.get(e, e))
if r >= 0 or e not in (errno.EPERM, errno.ENOSYS): print("` + probeOK + `")
`)
}

func TestC_DeniedSyscalls(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the unprotected side (off mode) needs root to reach these syscalls' implementations")
	}
	s := nativeSandbox(t)
	// Arguments are chosen so that, unprotected, each call is harmless: it
	// succeeds on the probe process itself or fails inside the real
	// implementation (EINVAL, ENOENT, ...) — never with EPERM/ENOSYS. NR is
	// the syscall's number on this architecture.
	cases := []struct{ name, setup, call string }{
		{"io_uring_setup", "p = ctypes.create_string_buffer(120)", "libc.syscall(NR, 1, p)"},
		{"bpf", "a = ctypes.create_string_buffer(128)", "libc.syscall(NR, 0, a, 128)"},
		{"perf_event_open", "a = ctypes.create_string_buffer(128)", "libc.syscall(NR, a, 0, -1, -1, 0)"},
		{"keyctl", "", "libc.syscall(NR, 0, -3, 0)"},
		{"add_key", "", `libc.syscall(NR, b"user", b"codellm", b"x", 1, -4)`},
		{"request_key", "", `libc.syscall(NR, b"user", b"codellm-none", None, 0)`},
		{"userfaultfd", "", "libc.syscall(NR, 0)"},
		{"kexec_load", "", "libc.syscall(NR, 0, 0, 0, 0)"},
		{"init_module", "", "libc.syscall(NR, 0, 0, b'')"},
		{"finit_module", "", "libc.syscall(NR, -1, b'', 0)"},
		{"delete_module", "", "libc.syscall(NR, b'codellm_none', 0)"},
		{"unshare", "", "libc.syscall(NR, 0x00020000)"},
		{"setns", "fd = os.open('/proc/self/ns/uts', os.O_RDONLY)", "libc.syscall(NR, fd, 0)"},
		{"mount", "", `libc.syscall(NR, b"none", b"/nonexistent-codellm", b"tmpfs", 0, 0)`},
		{"umount2", "", `libc.syscall(NR, b"/nonexistent-codellm", 0)`},
		{"chroot", "", `libc.syscall(NR, b"/nonexistent-codellm")`},
		{"pivot_root", "", `libc.syscall(NR, b"/nonexistent-codellm", b"/nonexistent-codellm")`},
		{"ptrace", "", "libc.syscall(NR, 0, 0, 0, 0)"},
		{"process_vm_readv", "", "libc.syscall(NR, os.getpid(), 0, 0, 0, 0, 0)"},
		{"process_vm_writev", "", "libc.syscall(NR, os.getpid(), 0, 0, 0, 0, 0)"},
		{"iopl", "", "libc.syscall(NR, 0)"},
		{"ioperm", "", "libc.syscall(NR, 0x80, 1, 0)"},
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			nr, ok := info.SyscallNames[c.name]
			if !ok {
				t.Skipf("%s has no %s", info.Name, c.name)
			}
			argv := syscallProbe(c.setup, strings.Replace(c.call, "NR", strconv.Itoa(nr), 1))
			off, err := runIn(t, offSandbox(t), "", nil, argv...)
			if err != nil {
				t.Fatal(err)
			}
			on, err := runIn(t, s, "", nil, argv...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(on.Stdout, "EPERM") && !strings.Contains(on.Stdout, "ENOSYS") || worked(on) {
				t.Fatalf("sandboxed: want EPERM/ENOSYS, got %q", on.Stdout)
			}
			if !worked(off) {
				// Not differential on this host: the kernel lacks the
				// syscall altogether. The filter's verdict for it is
				// checked in the seccomp package's unit tests.
				t.Logf("host kernel lacks %s (unprotected: %s)", c.name, strings.TrimSpace(off.Stdout))
			}
		})
	}
}

func TestC_Clone3IsENOSYS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the unprotected side needs root")
	}
	s := nativeSandbox(t)
	probe := py(`
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
r = libc.syscall(435, None, 0)
e = ctypes.get_errno()
print(errno.errorcode.get(e, e))
if e != errno.ENOSYS: print("` + probeOK + `")
`)
	_, on := differential(t, offSandbox(t), s, nil, probe)
	if !strings.Contains(on.Stdout, "ENOSYS") {
		t.Fatalf("clone3: %q", on.Stdout)
	}
	// clone with a namespace flag (CLONE_NEWUTS|SIGCHLD) via the raw
	// syscall, by this architecture's number (56 on x86-64, 220 on arm64).
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	cl := py(`
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
r = libc.syscall(` + strconv.Itoa(info.SyscallNames["clone"]) + `, 0x04000000 | 17, 0, 0, 0, 0)
if r == 0: os._exit(0)
e = ctypes.get_errno()
print(r, errno.errorcode.get(e, e))
if r > 0: os.waitpid(r, 0); print("` + probeOK + `")
`)
	differential(t, offSandbox(t), s, nil, cl)
}

func TestC_TIOCSTI(t *testing.T) {
	s := nativeSandbox(t)
	ptm, pts := openPTY(t)
	defer ptm.Close()
	defer pts.Close()
	probe := py(`
import fcntl, termios, sys
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x")
    print("` + probeOK + `")
except OSError as e:
    print("denied", e)
`)
	run := func(sb *Sandbox) outcome {
		dir := workdir(t, nil)
		r, err := sb.NewRun(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		f, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		p, err := r.Start(Spec{Path: probe[0], Args: probe, Dir: dir, Stdin: pts, Stdout: f, Stderr: f})
		if err != nil {
			t.Fatal(err)
		}
		res := p.Wait()
		b, _ := os.ReadFile(f.Name())
		return outcome{Result: res, Stdout: string(b)}
	}
	if off := run(offSandbox(t)); !worked(off) {
		skipOrFail(t, "TIOCSTI does not work on this host even unsandboxed (dev.tty.legacy_tiocsti=0?): %q", off.Stdout)
	}
	if on := run(s); worked(on) {
		t.Fatalf("TIOCSTI worked in the sandbox: %q", on.Stdout)
	}
}

func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		skipOrFail(t, "no pty: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestC_ForeignArchitecture: an i386 syscall through int 0x80 is killed by
// the filter's architecture check.
func TestC_ForeignArchitecture(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the probe is x86's int 0x80 ABI; the arch check itself is seccomp's unit test")
	}
	s := nativeSandbox(t)
	probe := py(`
import ctypes, mmap, os
code = b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"  # mov eax,20 (i386 getpid); int 0x80; ret
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
f = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
r = f()
print("int80 getpid", r, os.getpid())
if r == os.getpid(): print("` + probeOK + `")
`)
	off, err := runIn(t, withDisabled(s, MechSeccomp), "", nil, probe...)
	if err != nil {
		t.Fatal(err)
	}
	if !worked(off) {
		// Not a missing sandbox mechanism but a missing attack surface, so
		// not a failure under CODELLM_REQUIRE_SANDBOX; the filter's verdict
		// for foreign architectures is unit-tested in package seccomp.
		t.Skipf("int 0x80 does not work on this kernel even without the filter (no IA32 emulation): %+v", off.Result)
	}
	on, err := runIn(t, s, "", nil, probe...)
	if err != nil {
		t.Fatal(err)
	}
	if worked(on) || on.Signal != syscall.SIGSYS {
		t.Fatalf("want SIGSYS from the architecture check: %+v", on)
	}
}

func TestC_ProcSysAndSysNotWritable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the unprotected side needs root")
	}
	s := nativeSandbox(t)
	// Writing the current value back is harmless on the host.
	probe := py(`
p = "/proc/sys/kernel/domainname"
v = open(p).read()
open(p, "w").write(v)
print("` + probeOK + `")
`)
	differential(t, offSandbox(t), s, nil, probe)
	sys := py(`
import os
if os.path.exists("/sys/kernel") and os.listdir("/sys/fs/cgroup"): print("` + probeOK + `")
`)
	differential(t, offSandbox(t), s, nil, sys)
}

func TestC_NativeRefusesWhenMechanismMissing(t *testing.T) {
	s := nativeSandbox(t)
	for _, m := range []string{MechLandlock, MechSeccomp, MechUserNS, MechCgroup, MechOverlay} {
		b, _ := mechByName(m)
		c := &Sandbox{cfg: s.cfg, log: s.log, report: s.report, plat: s.plat}
		c.plat.avail &^= b
		c.plat.detail = map[mechSet]string{b: "simulated absence"}
		c.report = c.buildReport()
		if c.report.Ready {
			t.Fatalf("%s missing but report ready", m)
		}
		r, err := c.NewRun(nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.Start(Spec{Path: "/bin/true", Args: []string{"true"}, Dir: workdir(t, nil), Stdout: os.Stderr, Stderr: os.Stderr})
		r.Close()
		var ue *UnavailableError
		if !errorsAs(err, &ue) || ue.Mechanism != m || ue.Fix == "" {
			t.Fatalf("%s missing: Start err = %v, want UnavailableError naming it", m, err)
		}
		// besteffort runs without it.
		c.cfg.Mode = ModeBestEffort
		o, err := runIn(t, c, "", nil, "/bin/true")
		if err != nil || o.ExitCode != 0 {
			t.Fatalf("besteffort without %s: %v %+v", m, err, o)
		}
	}
}

// ---------- D. Filesystem confinement ----------

func TestD_WriteOutsideWorkdir(t *testing.T) {
	s := nativeSandbox(t)
	host := t.TempDir()
	os.Chmod(host, 0o777)
	probe := py(fmt.Sprintf(`
open(%q, "w").write("x")
print("`+probeOK+`")
`, filepath.Join(host, "escaped")))
	differential(t, offSandbox(t), s, nil, probe)
	// Landlock alone (mount namespace root still there but Landlock is
	// what stops a write to a writable host mount): /dev/shm of the
	// sandbox is writable, so probe a system dir with rootfs on and
	// Landlock off vs on is not informative; the root itself is read-only.
	for _, p := range []string{"/etc/x", "/usr/x", "/x", "/proc/x"} {
		on := mustRun(t, s, py(fmt.Sprintf(`
try:
    open(%q, "w").write("x"); print("`+probeOK+`")
except OSError as e: print(e)
`, p))...)
		if worked(on) {
			t.Fatalf("wrote %s inside the sandbox", p)
		}
	}
}

func TestD_HostSecretsInvisible(t *testing.T) {
	s := nativeSandbox(t)
	other := workdir(t, map[string]string{"secret.txt": "other run's data"})
	for _, path := range []string{"/etc/shadow", "/root", other + "/secret.txt", "/home", "/var/log"} {
		t.Run(strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s absent on this host", path)
			}
			probe := py(fmt.Sprintf(`
import os
p = %q
if os.path.isdir(p): os.listdir(p)
else: open(p).read()
print("`+probeOK+`")
`, path))
			differential(t, offSandbox(t), s, nil, probe)
		})
	}
}

func TestD_LandlockBehindTheMounts(t *testing.T) {
	// With the private root switched off, Landlock alone must still keep
	// code away from host files (defence in depth).
	s := nativeSandbox(t)
	dir, err := os.MkdirTemp("", "codellm-hostfile-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	secret := filepath.Join(dir, "world-readable")
	os.WriteFile(secret, []byte("host data"), 0o644)
	probe := py(fmt.Sprintf(`
open(%q).read()
print("`+probeOK+`")
`, secret))
	differential(t, withDisabled(s, MechLandlock, MechRootFS), withDisabled(s, MechRootFS), nil, probe)
}

func TestD_ProcShowsOnlyTheRun(t *testing.T) {
	s := nativeSandbox(t)
	probe := py(`
import os
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print(len(pids), pids)
if len(pids) > 3: print("` + probeOK + `")
`)
	differential(t, offSandbox(t), s, nil, probe)
}

func TestD_NoPersistence(t *testing.T) {
	s := nativeSandbox(t)
	for _, c := range []struct {
		sb      *Sandbox
		persist bool
	}{{offSandbox(t), true}, {s, false}} {
		dir := workdir(t, map[string]string{"run.py": "print('hi')"})
		tag := fmt.Sprintf("codellm-tmp-%d", time.Now().UnixNano())
		o, err := runIn(t, c.sb, dir, nil, sh("echo data > written; echo x > /tmp/"+tag+"; cat run.py")...)
		if err != nil || o.ExitCode != 0 || o.Stdout != "print('hi')" {
			t.Fatalf("%s: %v %+v", c.sb.Mode(), err, o)
		}
		_, errW := os.Stat(filepath.Join(dir, "written"))
		_, errT := os.Stat("/tmp/" + tag)
		os.Remove("/tmp/" + tag)
		if (errW == nil) != c.persist || (errT == nil) != c.persist {
			t.Fatalf("mode %s: workdir write persisted=%v, /tmp write persisted=%v; want %v", c.sb.Mode(), errW == nil, errT == nil, c.persist)
		}
	}
}

func TestD_PersistBindsWorkdir(t *testing.T) {
	s := nativeSandbox(t)
	dir := workdir(t, map[string]string{"in.txt": "abc"})
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	p, err := r.Start(Spec{Path: "/bin/sh", Args: sh("cat in.txt > out.txt; mkdir -p sub/dir; echo y > sub/dir/f"), Dir: dir, Persist: true, Stdout: null, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	if res := p.Wait(); res.ExitCode != 0 {
		t.Fatalf("%+v", res)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "abc" {
		t.Fatalf("persisted write: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub/dir/f")); err != nil {
		t.Fatal(err)
	}
}

func TestD_SymlinksAndHardlinksToHostFiles(t *testing.T) {
	s := nativeSandbox(t)
	probe := sh("ln -s /etc/shadow s && cat s >/dev/null && echo " + probeOK)
	differential(t, offSandbox(t), s, nil, probe)
	hard := sh("ln /etc/shadow h 2>/dev/null && cat h >/dev/null && echo " + probeOK)
	if os.Geteuid() == 0 {
		differential(t, offSandbox(t), s, nil, hard)
	}
	// A link planted in the workdir by someone else resolves inside.
	dir := workdir(t, nil)
	if err := os.Symlink("/etc/shadow", filepath.Join(dir, "planted")); err != nil {
		t.Fatal(err)
	}
	o, err := runIn(t, s, dir, nil, sh("cat planted && echo "+probeOK)...)
	if err != nil || worked(o) {
		t.Fatalf("planted symlink: %v %+v", err, o)
	}
}

// ---------- E. Network ----------

func listenLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testhelp.AcceptAndClose(t, ln)
	return ln.Addr().String()
}

func connectProbe(addr string) []string {
	host, port, _ := net.SplitHostPort(addr)
	return py(fmt.Sprintf(`
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect((%q, %s)); print("`+probeOK+`")
except OSError as e: print("denied", e)
`, host, port))
}

func TestE_HostLoopbackUnreachable(t *testing.T) {
	s := nativeSandbox(t)
	addr := listenLoopback(t)
	_, on := differential(t, offSandbox(t), s, nil, connectProbe(addr))
	if on.Wall > 10*time.Second {
		t.Fatalf("connect did not fail fast: %v", on.Wall)
	}
	// Landlock alone (network namespace off): TCP connect denied, from
	// Landlock ABI 4 (Linux 6.7) on; before it the namespace is all there is.
	if s.plat.landlockABI < 4 {
		t.Logf("Landlock ABI %d has no TCP rules: the network namespace alone was checked", s.plat.landlockABI)
		return
	}
	differential(t, withDisabled(s, MechLandlock, MechNetNS), withDisabled(s, MechNetNS), nil, connectProbe(addr))
}

func TestE_OperatorEnabledNetwork(t *testing.T) {
	s := sandboxFor(t, ModeNative, true)
	if !s.Report().Ready {
		skipOrFail(t, "native sandbox unavailable: %v", s.Report().Missing)
	}
	rep := s.Report()
	if !rep.Network || len(rep.Warnings) == 0 {
		t.Fatalf("report does not show the enabled network: %+v", rep)
	}
	o := mustRun(t, s, connectProbe(listenLoopback(t))...)
	if !worked(o) {
		t.Fatalf("network enabled but connect failed: %+v", o)
	}
}

func TestE_UnixSockets(t *testing.T) {
	s := nativeSandbox(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	path := filepath.Join(dir, "host.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(path, 0o777)
	abstract := fmt.Sprintf("@codellm-test-%d", time.Now().UnixNano())
	aln, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer aln.Close()
	for _, l := range []net.Listener{ln, aln} {
		go func(l net.Listener) {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}(l)
	}
	probe := func(addr string) []string {
		if addr[0] == '@' {
			addr = "\\0" + addr[1:]
		}
		return py(`
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("` + addr + `"); print("` + probeOK + `")
except OSError as e: print("denied", e)
`)
	}
	differential(t, offSandbox(t), s, nil, probe(path))
	differential(t, offSandbox(t), s, nil, probe(abstract))
	// Landlock scoping alone (network namespace off) stops the abstract one.
	differential(t, withDisabled(s, MechLandlock, MechNetNS), withDisabled(s, MechNetNS), nil, probe(abstract))
}

func TestE_OnlyLoopbackInterface(t *testing.T) {
	s := nativeSandbox(t)
	probe := py(`
import socket
names = [n for _, n in socket.if_nameindex()]
print(names)
if any(n != "lo" for n in names): print("` + probeOK + `")
`)
	differential(t, offSandbox(t), s, nil, probe)
}

// ---------- F. Isolation between runs and from the host ----------

func TestF_Hostname(t *testing.T) {
	s := nativeSandbox(t)
	probe := py(`
import socket
print(socket.gethostname())
if socket.gethostname() != "codellm": print("` + probeOK + `")
`)
	_, on := differential(t, offSandbox(t), s, nil, probe)
	if strings.TrimSpace(on.Stdout) != "codellm" {
		t.Fatalf("hostname %q", on.Stdout)
	}
}

// TestF_ConcurrentRunsIsolated: run A holds a SysV message queue, a file and
// a sleeping process; run B, concurrently, tries to see and signal them.
func TestF_ConcurrentRunsIsolated(t *testing.T) {
	s := nativeSandbox(t)
	for _, c := range []struct {
		sb   *Sandbox
		leak bool
	}{{offSandbox(t), true}, {s, false}} {
		dirA := workdir(t, map[string]string{"secret": "A"})
		rA, err := c.sb.NewRun(nil)
		if err != nil {
			t.Fatal(err)
		}
		outR, outW, _ := os.Pipe()
		pA, err := rA.Start(Spec{Path: "/bin/sh", Args: sh("ipcmk -Q -K 0x2a >/dev/null; echo ready; exec sleep 30"), Dir: dirA, Stdout: outW, Stderr: outW})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		outR.Read(buf)
		outR.Close()
		script := fmt.Sprintf(`
import os, signal, subprocess
leaks = []
try:
    open(%q).read(); leaks.append("file")
except OSError: pass
q = subprocess.run(["ipcs", "-q"], capture_output=True, text=True).stdout
if "0x0000002a" in q: leaks.append("ipc")
try:
    os.kill(%d, 0); leaks.append("signal")
except OSError: pass
print(leaks)
if leaks: print("`+probeOK+`")
`, filepath.Join(dirA, "secret"), pA.Pid())
		o := mustRun(t, c.sb, py(script)...)
		pA.Kill()
		pA.Wait()
		rA.Close()
		if c.sb.Mode() == ModeOff {
			exec := mustRun(t, c.sb, sh("ipcrm -Q 0x2a")...)
			_ = exec
		}
		if worked(o) != c.leak {
			t.Fatalf("mode %s: leaked=%v (%s), want %v", c.sb.Mode(), worked(o), o.Stdout, c.leak)
		}
		if c.leak && !strings.Contains(o.Stdout, "file") {
			t.Fatalf("off mode should see everything: %s", o.Stdout)
		}
	}
}

func TestE_NetworkEnabledHasResolver(t *testing.T) {
	if _, err := os.Stat("/etc/resolv.conf"); err != nil {
		t.Skip("host has no /etc/resolv.conf")
	}
	on := sandboxFor(t, ModeNative, true)
	if !on.Report().Ready {
		skipOrFail(t, "native sandbox unavailable: %v", on.Report().Missing)
	}
	probe := sh("test -r /etc/resolv.conf && echo " + probeOK)
	differential(t, on, nativeSandbox(t), nil, probe)
}

// TestC_CodellmBinaryOutOfReach: the helper is a sealed in-memory copy
// (no write can ever change it), and codellm's on-disk binary is not even
// visible inside the sandbox.
func TestC_CodellmBinaryOutOfReach(t *testing.T) {
	s := nativeSandbox(t)
	fd, err := strconv.Atoi(strings.TrimPrefix(s.plat.helperPath, "/proc/self/fd/"))
	if err != nil {
		t.Fatalf("helper path %q is not a sealed descriptor", s.plat.helperPath)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		t.Fatal(err)
	}
	const want = unix.F_SEAL_SEAL | unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK
	if seals&want != want {
		t.Fatalf("helper seals %#x, want %#x", seals, want)
	}
	if _, err := unix.Pwrite(fd, []byte{0}, 0); err == nil {
		t.Fatal("write to the sealed helper succeeded")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe := py(fmt.Sprintf(`
open(%q, "rb").read(4)
print("`+probeOK+`")
`, exe))
	differential(t, offSandbox(t), s, nil, probe)
}

// Every Sandbox of a process execs one sealed copy of the executable: New copies the binary once per
// process, not once per Sandbox, so Sandboxes that come and go (tests, doctor, a command sandbox beside
// serve's) leave no copy behind.
func TestSandboxesShareOneSealedHelper(t *testing.T) {
	first := nativeSandbox(t)
	var paths []string
	for range 3 {
		s, err := New(Config{Mode: ModeBestEffort})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, s.plat.helperPath)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range paths {
		if p == "" || p != first.plat.helperPath {
			t.Fatalf("helper paths %q, the first Sandbox's %q: not one copy", paths, first.plat.helperPath)
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	copies := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, "memfd:codellm-sandbox-helper") {
			copies++
		}
	}
	if copies != 1 {
		t.Fatalf("%d sealed copies of the executable open, want 1", copies)
	}
}
