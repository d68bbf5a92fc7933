//go:build linux

package hook

import (
	"runtime"
	"syscall"
	"unsafe"
)

// init runs the helper when this process was started as one, right after
// package syscall is initialised and before any heavier package (see the
// package comment). The runtime keeps the main goroutine locked to the
// main thread for the whole of package initialisation, so the per-thread
// state the helper sets (capabilities, no_new_privs, Landlock, seccomp)
// is on the thread that execs without runtime.LockOSThread, whose first
// call would start the runtime's template thread for nothing.
func init() {
	if IsHelper() {
		run()
	}
}

// IsHelper reports whether this process is a sandbox helper: the
// environment marker (free to check) and argv[1] (read from
// /proc/self/cmdline, only when the marker is present) must both say so.
func IsHelper() bool {
	if v, ok := syscall.Getenv(EnvMarker); !ok || v != "1" {
		return false
	}
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	var buf [256]byte
	n, _ := syscall.Read(fd, buf[:])
	if n <= 0 {
		return false
	}
	args := splitNUL(buf[:n])
	return len(args) == 2 && args[1] == Marker
}

func splitNUL(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, string(b[start:]))
	}
	return out
}

// Run is the helper for callers outside package initialisation (see
// sandbox.Main): it locks the goroutine to its thread, then runs the
// helper. It never returns.
func Run() {
	runtime.LockOSThread()
	run()
}

// run confines the process step by step, each step only possible before
// the next (mounts need capabilities, Landlock must see the final paths,
// capabilities go before seccomp, seccomp is last), then execs. It never
// returns.
func run() {
	sp := readSpec()
	Trace("h.spec")
	buildWorld(sp)
	Trace("h.world")
	lockDown(sp)
	Trace("h.locked")
	if sp.ProbeOnly {
		rec := []byte{Started}
		if sp.Init {
			rec = StartedRecord(0) // what the server reads from an init; no program
		}
		_, _ = syscall.Write(StatusFD, rec)
		syscall.Exit(0)
	}
	if sp.Init {
		runInit(sp)
	}
	if _, err := syscall.Write(StatusFD, []byte{Started}); err != nil {
		syscall.Exit(126)
	}
	err := syscall.Exec(sp.Path, sp.Args, sp.Env)
	_, _ = syscall.Write(StatusFD, Failure(MExec, sp.Path+": "+err.Error()))
	syscall.Exit(127)
}

// readSpec makes the helper non-dumpable, then reads and decodes the
// server's spec; a status pipe it cannot keep private ends it at once.
func readSpec() *Spec {
	if _, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, StatusFD, syscall.F_SETFD, syscall.FD_CLOEXEC); e != 0 {
		syscall.Exit(126) // no status channel: the parent sees EOF without Started
	}
	_, _, _ = syscall.RawSyscall(syscall.SYS_FCNTL, DirFD, syscall.F_SETFD, syscall.FD_CLOEXEC)
	// Non-dumpable first: while the helper still holds capabilities nothing
	// else in the namespace may ptrace it or open its /proc/<pid>/mem.
	if e := prctl(syscall.PR_SET_DUMPABLE, 0); e != nil {
		fail(MHelper, "set non-dumpable: ", e)
	}
	raw, err := readAll(SpecFD, maxSpec)
	if err != nil {
		fail(MHelper, "read spec from the server: ", err)
	}
	syscall.Close(SpecFD)
	sp, err := Decode(raw)
	if err != nil {
		fail(MHelper, "read spec from the server: malformed spec (", err, ")")
	}
	return sp
}

// buildWorld makes what the program will see, while the helper still has
// its capabilities in the namespace: the cgroup and time namespaces, the
// private root, the host name, the deterministic pieces, the working
// directory and the egress listener.
func buildWorld(sp *Spec) {
	has := func(m uint32) bool { return sp.Mech&m == m }
	if has(MCgroupNS) {
		// After the spec was read the server has placed us in the run's
		// cgroup, so the namespace is rooted there.
		if err := syscall.Unshare(syscall.CLONE_NEWCGROUP); err != nil {
			fail(MCgroupNS, "unshare cgroup namespace: ", err)
		}
	}
	if len(sp.Determ) > 0 {
		if err := newTimeNamespace(); err != nil {
			fail(MHelper, err.Error())
		}
	}
	if has(MRootFS) {
		if err := setupRoot(sp); err != nil {
			fail(rootFailure(err), err.Error())
		}
	}
	if has(MUTSNS) {
		if err := syscall.Sethostname([]byte(sp.UTSName)); err != nil {
			fail(MUTSNS, "sethostname: ", err)
		}
		_ = syscall.Setdomainname([]byte("(none)"))
	}
	if len(sp.Determ) > 0 {
		if err := setupDeterminism(sp); err != nil {
			fail(MHelper, err.Error())
		}
	}
	if has(MRootFS) {
		if err := syscall.Chdir(sp.Dir); err != nil {
			fail(MRootFS, "chdir to workdir ", sp.Dir, ": ", err)
		}
	} else if err := syscall.Fchdir(DirFD); err != nil {
		fail(MHelper, "chdir to workdir ", sp.Dir, ": ", err)
	}
	if sp.Egress {
		if err := setupEgress(); err != nil {
			fail(MNetNS, err.Error())
		}
	}
}

// lockDown applies the per-thread confinement, in the only order that
// works: rlimits, no_new_privs, Landlock, no capabilities, no stray
// descriptors, seccomp last.
func lockDown(sp *Spec) {
	has := func(m uint32) bool { return sp.Mech&m == m }
	if has(MRlimit) {
		if err := applyRlimits(sp); err != nil {
			fail(MRlimit, err.Error())
		}
	}
	// no_new_privs before Landlock and seccomp (both need it without
	// CAP_SYS_ADMIN) and before exec (setuid binaries grant nothing).
	if has(MNoNewPrivs) {
		// This thread; seccomp's TSYNC gives it to an init's other threads.
		if e := prctl(prSetNoNewPrivs, 1); e != nil {
			fail(MNoNewPrivs, "prctl(PR_SET_NO_NEW_PRIVS): ", e)
		}
	}
	if has(MLandlock) {
		if err := restrictLandlock(sp); err != nil {
			fail(MLandlock, err.Error())
		}
	}
	syscall.Close(DirFD)
	if has(MCaps) {
		if err := dropCapabilities(sp.CapLastCap, sp.Init); err != nil {
			fail(MCaps, err.Error())
		}
	}
	// Every descriptor but stdio and the status pipe must be closed in the
	// program; the Go runtime's own are close-on-exec already, this covers
	// anything inherited by mistake.
	const closeRangeCloexec = 1 << 2
	_, _, _ = syscall.RawSyscall(sysCloseRange, DirFD+1, ^uintptr(0), closeRangeCloexec)
	if has(MSeccomp) {
		if err := installSeccomp(sp.Seccomp, sp.Init); err != nil {
			fail(MSeccomp, "cannot install filter: ", err)
		}
	}
}

// fail reports a setup failure on the status pipe and exits 125.
func fail(mech uint32, parts ...any) {
	var s []byte
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			s = append(s, v...)
		case error:
			s = append(s, v.Error()...)
		}
	}
	_, _ = syscall.Write(StatusFD, Failure(mech, string(s)))
	syscall.Exit(125)
}

// herr is the helper's error: a step and the errno it failed with.
type herr struct {
	what string
	err  error
}

func (e *herr) Error() string {
	if e.err == nil {
		return e.what
	}
	return e.what + ": " + e.err.Error()
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return &herr{what, err}
}

func prctl(op, arg uintptr) error {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, op, arg, 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

func readAll(fd, limit int) ([]byte, error) {
	buf := make([]byte, 0, 8192)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= limit {
				return nil, &herr{"spec larger than " + itoa(int64(limit)) + " bytes", nil}
			}
			nb := make([]byte, len(buf), 2*cap(buf))
			copy(nb, buf)
			buf = nb
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var b [24]byte
	i := len(b)
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

func applyRlimits(sp *Spec) error {
	set := func(name string, res int, v uint64) error {
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: v, Max: v}); err != nil {
			return wrap("setrlimit "+name+"="+itoa(int64(v)), err)
		}
		return nil
	}
	if err := set("CORE", syscall.RLIMIT_CORE, 0); err != nil {
		return err
	}
	if sp.FileSize > 0 {
		if err := set("FSIZE", syscall.RLIMIT_FSIZE, uint64(sp.FileSize)); err != nil {
			return err
		}
	}
	if sp.OpenFiles > 0 {
		if err := set("NOFILE", syscall.RLIMIT_NOFILE, uint64(sp.OpenFiles)); err != nil {
			return err
		}
	}
	if sp.CPUSeconds > 0 {
		// soft == hard: at the hard limit the kernel sends a SIGKILL, which
		// nothing can handle, so codellm attributes it to the limit.
		if err := set("CPU", rlimitCPU, sp.CPUSeconds); err != nil {
			return err
		}
	}
	return nil
}

const rlimitCPU = 0 // RLIMIT_CPU

// onThreads makes a confining syscall on this thread and, for an init
// (allThreads), on every other thread of the process too: the capability
// sets (no_new_privs reaches them with the seccomp filter's TSYNC, the
// Landlock domain does not: see restrictLandlock). Each call stops the
// world and signals every thread: 0.5 ms of the block's path here.
//
// Capabilities, no_new_privs and the Landlock domain are per thread. A
// helper that execs the program needs them only on the exec'ing thread (the
// exec ends the others), but an init lives on beside the program with the Go
// runtime's threads: sysmon, a holding init's HoldSignal goroutine's, whatever the
// scheduler started while the helper blocked in a syscall. Cloned before
// the lockdown, or from a thread that was, five of seven of them still held
// CAP_SYS_ADMIN and CAP_SETPCAP of the block's user namespace
// (TestInitThreadsAreConfined); seccomp alone (TSYNC) covered them.
// syscall.AllThreadsSyscall runs the call on each thread (and kills the
// process should any answer differ). It does not exist in a cgo build
// (ENOTSUP); the release binary is static, and so is `make test`'s.
func onThreads(allThreads bool, trap, a1, a2, a3 uintptr) (r1, r2 uintptr, e syscall.Errno) {
	if allThreads {
		if r1, r2, e = syscall.AllThreadsSyscall(trap, a1, a2, a3); e != syscall.ENOTSUP {
			return r1, r2, e
		}
	}
	return syscall.RawSyscall(trap, a1, a2, a3)
}

// dropCapabilities empties the bounding, ambient, inheritable, permitted
// and effective sets of the calling thread (the one that execs) and, for
// an init, the permitted, effective and inheritable sets of every thread
// (the bounding and ambient sets only matter at an exec, which only the
// calling thread's fork of the program makes).
func dropCapabilities(last int64, allThreads bool) error {
	if last <= 0 {
		last = 63
	}
	for c := int64(0); c <= last; c++ {
		if e := prctl(prCapbsetDrop, uintptr(c)); e != nil && e != syscall.EINVAL {
			return wrap("drop bounding capability "+itoa(c), e)
		}
	}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0, 0, 0, 0); e != 0 {
		return wrap("clear ambient capabilities", e)
	}
	hdr := struct {
		version uint32
		pid     int32
	}{linuxCapabilityVersion3, 0}
	var data [2]struct{ effective, permitted, inheritable uint32 }
	if _, _, e := onThreads(allThreads, syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return wrap("capset", e)
	}
	return nil
}

const (
	prSetNoNewPrivs         = 38
	prCapbsetDrop           = 24
	prCapAmbient            = 47
	prCapAmbientClearAll    = 4
	linuxCapabilityVersion3 = 0x20080522
)

// installSeccomp loads the server-assembled filter on the calling thread.
// A helper that execs the program does not synchronise it to its other
// threads (the exec destroys them); an init, which lives on with the Go
// runtime's threads, does (TSYNC: every thread, no_new_privs included).
func installSeccomp(prog []byte, allThreads bool) error {
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog)/8 > 4096 {
		return &herr{"invalid filter of " + itoa(int64(len(prog))) + " bytes", nil}
	}
	// Copy into 8-byte aligned memory: struct sock_filter {u16 code; u8 jt,
	// jf; u32 k} is exactly what the server laid out in native order.
	words := make([]uint64, len(prog)/8)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(prog)), prog)
	fprog := struct {
		len    uint16
		_      [6]byte
		filter *uint64
	}{len: uint16(len(words)), filter: &words[0]}
	const seccompSetModeFilter, filterFlagTSync = 1, 1
	var flags uintptr
	if allThreads {
		flags = filterFlagTSync
	}
	r, _, e := syscall.RawSyscall(sysSeccomp, seccompSetModeFilter, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(words)
	if e != 0 {
		return e
	}
	if r != 0 { // TSYNC: the id of a thread that could not be synchronised
		return &herr{"thread " + itoa(int64(r)) + " cannot take the filter", nil}
	}
	return nil
}
