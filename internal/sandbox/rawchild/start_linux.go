//go:build linux && (amd64 || arm64)

package rawchild

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The runtime's fork hooks, as package syscall uses them around its own
// fork (exported to other packages on purpose: go.dev/issue/67401).
// BeforeFork blocks signals and makes any stack growth in the child fatal;
// AfterFork undoes it in the parent. The child does what AfterForkInChild
// would itself (childSignals).
//
//go:linkname runtime_BeforeFork syscall.runtime_BeforeFork
func runtime_BeforeFork()

//go:linkname runtime_AfterFork syscall.runtime_AfterFork
func runtime_AfterFork()

// Program is what the init starts once the Prog has run.
type Program struct {
	Path string
	Args []string
	Env  []string
	// Hold, when set, is the signal that makes the init end everything
	// else in its namespace at once (as the kernel would at its death) and
	// that it therefore catches; and once the program is over and reported,
	// the init does not exit but holds the namespace, its private mounts
	// included, until it is killed: whoever started it reads what the
	// program left (through /proc/<init>/root) first.
	Hold syscall.Signal
	// Direct makes the child exec the program itself once its steps have
	// run, instead of staying its init: after one Started byte (KindStarted,
	// nothing more) on its status descriptor, which the exec closes. The
	// program is then its PID namespace's init, or without one, a process
	// like any other. A failed exec is reported after the Started byte.
	Direct bool
	// Feed, when set, is a stream the init feeds for the block's life
	// (forked before the program, so its PID is part of a pinned sequence).
	Feed *Feed
	// PinPID, when set, is the program's PID in its namespace (see pinPID).
	PinPID int
	// InitTag is the tag of the init's own failures (the feeder's fork, the
	// PID pin), as Prog.Tag is a step's.
	InitTag uint32
}

// Attr is how the child is cloned and wired.
type Attr struct {
	// Cloneflags are the clone's namespaces (CLONE_NEW*). Without
	// CLONE_NEWPID the child is not an init: it reaps only the program
	// and does not end the program's leftovers.
	Cloneflags uintptr
	// UIDMap and GIDMap are written to the child's maps (its setgroups
	// denied) before it runs its first step; needed with CLONE_NEWUSER.
	UIDMap, GIDMap string
	// KeepShared keeps the init's copy of the caller's memory: by default
	// it lets go of every private anonymous page but its own frame and stack
	// once the program runs (see dropShared), so that the caller's writes
	// meanwhile are not copy-on-write faults.
	KeepShared bool
	// Name, when set, is the child's name (PR_SET_NAME, at most 15 bytes
	// kept), set before anything else: a fork that never execs otherwise
	// keeps its parent thread's name for life.
	Name string
	// Pdeathsig is sent to the child when the caller's thread exits (with
	// Parent, the caller's parent's). It holds across the steps: one that
	// changes the child's ids (which clears it in the kernel) re-arms it,
	// and a child whose status descriptor has lost its reader by then (its
	// reader, the process the signal stands for, died in between) exits
	// with 125 instead.
	Pdeathsig syscall.Signal
	// Parent makes the child the caller's parent's child (CLONE_PARENT),
	// as the spawner clones helpers for the server; the caller's parent
	// then reaps it (Start kills such a child when writing its maps fails,
	// but cannot reap it).
	Parent bool
	// UseCgroupFD places the child in the cgroup v2 directory CgroupFD at
	// its birth (clone3's CLONE_INTO_CGROUP), so that nothing it does runs
	// outside it.
	UseCgroupFD bool
	CgroupFD    int
	// Stdin, Stdout and Stderr become the program's 0, 1 and 2 (the init
	// closes its copies once the program runs); Status is the init's
	// descriptor 3 for its records, closed for the program.
	Stdin, Stdout, Stderr, Status FD
	// Extra are the steps' descriptors 4, 5, ... (a workdir's tree from
	// open_tree, say); the init closes them once the steps have run, and
	// the program never has them.
	Extra []FD
	// IdleUnshare, for Prefork only, are namespaces (CLONE_NEWNS, NEWNET,
	// NEWIPC, NEWUTS) the idle child unshares while it waits, right after
	// its maps: their making then is off the program's path too (a child
	// that cannot is gone, and Run fails). Its program must not unshare them
	// again.
	IdleUnshare uintptr
}

// FD is a descriptor the child gets: an *os.File, or a bare number the
// caller owns. Start only reads it; the caller keeps it open until Start
// returns.
type FD interface{ Fd() uintptr }

// maxFiles bounds 0..3 and Extra.
const maxFiles = 16

// frame is everything the child reads, prepared before the fork.
type frame struct {
	ops       *op
	nops      uintptr
	slots     [maxSlots]uintptr
	path      *byte
	argv      **byte
	envv      **byte
	fds       [maxFiles]uintptr // stdin, stdout, stderr, status, then Extra, as the caller has them
	nfds      uintptr
	high      uintptr // above every one of fds and every place they go to
	syncR     uintptr // with a user namespace: the child waits for its maps on it
	syncW     uintptr
	synced    bool
	pdeath    uintptr
	drop      [maxDrop]memRange // what the child lets go of before its steps (dropShared)
	ndrop     uintptr
	later     [maxDrop]memRange // and once its program runs: the Prog's memory
	nlater    uintptr
	pageMask  uintptr
	tp        uintptr          // the forking thread's thread pointer, the child's too (adviseOutside)
	marked    bool             // every range of drop was marked MADV_DONTFORK for the fork
	name      *byte            // PR_SET_NAME, or nil
	npath     uintptr          // len of *path, for an exec failure's record
	rec       [failHeader]byte // the record being written
	execErr   uintptr          // the program's failed exec, stored by it (it shares the init's memory until then)
	hold      uintptr          // Program.Hold
	direct    bool             // Program.Direct
	feedFD    uintptr          // Program.Feed's FD (0: no feeder)
	feedState [16]uint32       // and its state
	pinPID    uintptr          // Program.PinPID
	initTag   uint32           // Program.InitTag
}

// Start forks the child, which runs p and then starts prog as its init.
// It returns the child's PID (in the caller's namespace); the child's
// records arrive on a.Status, and the caller reaps the child.
func Start(p *Prog, prog Program, a Attr) (int, error) {
	files, err := checkAttr(p, a)
	if err != nil {
		return 0, err
	}
	f, err := newFrame(p, prog, files, a.Pdeathsig, a.Name)
	if err != nil {
		return 0, err
	}
	if !a.KeepShared {
		planDrop(f, p)
	}
	var args *cloneArgs
	flags := cloneFlags(a)
	if a.UseCgroupFD {
		args = &cloneArgs{flags: uint64(flags) | unix.CLONE_INTO_CGROUP, exitSignal: uint64(syscall.SIGCHLD), cgroup: uint64(a.CgroupFD)}
		if a.Parent {
			// clone3 refuses an exit signal with CLONE_PARENT (EINVAL): the
			// child gets the caller's own, SIGCHLD for a spawner os/exec started.
			args.exitSignal = 0
		}
	}
	pid, err := cloneWithMaps(f, a, func() (uintptr, syscall.Errno) { return forkChild(f, flags, args) })
	runtime.KeepAlive(p)
	runtime.KeepAlive(files)
	return pid, err
}

// checkAttr checks a and p before a fork and lists the child's descriptors.
func checkAttr(p *Prog, a Attr) ([]FD, error) {
	if p.err != nil {
		return nil, p.err
	}
	files := append([]FD{a.Stdin, a.Stdout, a.Stderr, a.Status}, a.Extra...)
	for _, f := range files {
		if f == nil || f.Fd() == ^uintptr(0) { // a nil *os.File has Fd -1
			return nil, errors.New("rawchild: Stdin, Stdout, Stderr, Status and every Extra are needed")
		}
	}
	if len(files) > maxFiles {
		return nil, fmt.Errorf("rawchild: %d descriptors, at most %d", len(files), maxFiles)
	}
	return files, checkMaps(a)
}

func checkMaps(a Attr) error {
	if a.Cloneflags&syscall.CLONE_NEWUSER != 0 && (a.UIDMap == "" || a.GIDMap == "") {
		return errors.New("rawchild: a user namespace needs UIDMap and GIDMap")
	}
	return nil
}

func cloneFlags(a Attr) uintptr {
	if a.Parent {
		return a.Cloneflags | syscall.CLONE_PARENT
	}
	return a.Cloneflags
}

// cloneWithMaps runs fork (which clones a child that first runs
// childStart(f)) and, with a user namespace, writes the child's maps and
// releases it.
func cloneWithMaps(f *frame, a Attr, fork func() (uintptr, syscall.Errno)) (int, error) {
	newUser := a.Cloneflags&syscall.CLONE_NEWUSER != 0
	var sync [2]int
	if newUser {
		if err := syscall.Pipe2(sync[:], syscall.O_CLOEXEC); err != nil {
			return 0, fmt.Errorf("rawchild: pipe: %w", err)
		}
		f.syncR, f.syncW, f.synced = uintptr(sync[0]), uintptr(sync[1]), true
		defer syscall.Close(sync[0])
		defer syscall.Close(sync[1])
	}
	// ForkLock: no fork by package syscall may see the ranges fork marks
	// MADV_DONTFORK for its own clone (markNoFork).
	syscall.ForkLock.Lock()
	pid, errno := fork()
	syscall.ForkLock.Unlock()
	if errno != 0 {
		return 0, fmt.Errorf("rawchild: clone: %w", errno)
	}
	if newUser {
		if err := writeMaps(int(pid), a.UIDMap, a.GIDMap); err != nil {
			reapFailed(int(pid))
			return 0, err
		}
		if _, err := syscall.Write(sync[1], []byte{1}); err != nil {
			reapFailed(int(pid))
			return 0, fmt.Errorf("rawchild: release the child: %w", err)
		}
	}
	return int(pid), nil
}

// newFrame lays out the child's frame in p's own frame and memory (the
// program's path, argv and environment in its arena): all of it then exists
// at the same addresses in a child forked before the Prog was built
// (Prefork), which receives it byte for byte.
func newFrame(p *Prog, prog Program, files []FD, pdeath syscall.Signal, name string) (*frame, error) {
	if hasNUL([]string{prog.Path, name}, prog.Args, prog.Env) {
		return nil, fmt.Errorf("rawchild: a NUL byte in the program's path, arguments, environment or name")
	}
	if p.fr == nil {
		p.fr = new(frame)
	}
	f := p.fr
	*f = frame{nops: uintptr(len(p.ops)), high: uintptr(max(4, len(files))), pdeath: uintptr(pdeath), hold: uintptr(prog.Hold),
		direct: prog.Direct}
	if fd := prog.Feed; fd != nil {
		if fd.FD < 4 {
			return nil, fmt.Errorf("rawchild: the feed's descriptor %d is one of the program's", fd.FD)
		}
		f.feedFD, f.feedState = uintptr(fd.FD), fd.State
	}
	f.pinPID, f.initTag = uintptr(max(prog.PinPID, 0)), prog.InitTag
	f.path = p.cstr(prog.Path)
	f.npath = uintptr(min(len(prog.Path), maxWhat))
	f.argv, f.envv = p.cstrs(prog.Args), p.cstrs(prog.Env)
	if name != "" {
		f.name = p.cstr(name)
	}
	if len(p.ops) > 0 {
		f.ops = &p.ops[0]
	}
	f.nfds = uintptr(len(files))
	for i, file := range files {
		f.fds[i] = file.Fd()
		f.high = max(f.high, f.fds[i]+1)
	}
	if p.err != nil {
		return nil, p.err
	}
	return f, nil
}

// hasNUL reports whether any string of lists holds a NUL byte (it would
// end the C string early).
func hasNUL(lists ...[]string) bool {
	for _, l := range lists {
		for _, s := range l {
			if strings.IndexByte(s, 0) >= 0 {
				return true
			}
		}
	}
	return false
}

// cstr is a NUL-terminated copy of s in p's memory.
func (p *Prog) cstr(s string) *byte {
	b, _ := p.Bytes(len(s) + 1)
	copy(b, s)
	return &b[0]
}

// cstrs is a NULL-terminated array of C strings in p's memory: the
// addresses are stored as integers (the memory is the arena's, kept alive
// by p), so the array holds no pointer the collector would have to see.
func (p *Prog) cstrs(ss []string) **byte {
	arr, _ := p.Bytes((len(ss) + 1) * int(unsafe.Sizeof(uintptr(0))))
	for i, s := range ss {
		binary.NativeEndian.PutUint64(arr[i*8:], uint64(uintptr(unsafe.Pointer(p.cstr(s)))))
	}
	return (**byte)(unsafe.Pointer(&arr[0]))
}

// cloneArgs is struct clone_args up to its cgroup field (clone3's
// CLONE_ARGS_SIZE_VER2, 88 bytes).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

// forkChild clones the child (with clone3 when args is set). In the child
// it never returns: everything after the clone runs without the runtime,
// in nosplit code.
//
//go:noinline
//go:norace
//go:nocheckptr
func forkChild(f *frame, flags uintptr, args *cloneArgs) (uintptr, syscall.Errno) {
	runtime_BeforeFork()
	f.tp = forkTP()
	f.marked = markNoFork(&f.drop, f.ndrop, f.pageMask, f.tp) // the child's copy has it too
	var pid uintptr
	var errno syscall.Errno
	if args != nil {
		pid, _, errno = syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0)
	} else {
		pid, _, errno = syscall.RawSyscall6(syscall.SYS_CLONE, flags|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	}
	if errno != 0 || pid != 0 {
		unmarkNoFork(&f.drop, f.ndrop, f.pageMask, f.tp)
		runtime_AfterFork()
		return pid, errno
	}
	childSignals()
	childMain(f)
	return 0, 0 // not reached: childMain exits
}

// atFDCWD is unix.AT_FDCWD as a system call argument.
const atFDCWD = ^uintptr(99)

func writeMaps(pid int, uidMap, gidMap string) error {
	// Raw calls on one path buffer: no *os.File (and its poller check) per
	// file, since a spawner writes three per child.
	var path [48]byte
	dir := strconv.AppendInt(append(path[:0], "/proc/"...), int64(pid), 10)
	dir = append(dir, '/')
	for _, w := range [...]struct{ file, data string }{{"setgroups", "deny"}, {"gid_map", gidMap}, {"uid_map", uidMap}} {
		name := append(append(dir, w.file...), 0)
		fd, _, e := syscall.Syscall6(syscall.SYS_OPENAT, atFDCWD, uintptr(unsafe.Pointer(&name[0])),
			syscall.O_WRONLY|syscall.O_CLOEXEC, 0, 0, 0)
		if e == 0 {
			var n uintptr
			n, _, e = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.StringData(w.data))), uintptr(len(w.data)))
			if e == 0 && n != uintptr(len(w.data)) {
				e = syscall.EIO
			}
			syscall.Close(int(fd))
		}
		if e != 0 {
			return fmt.Errorf("rawchild: write the child's %s: %w", w.file, e)
		}
	}
	return nil
}

func reapFailed(pid int) {
	_ = syscall.Kill(pid, syscall.SIGKILL)
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			return
		}
	}
}

// The child's own code. Everything below runs after the fork: nosplit (the
// stack cannot grow), no allocation, no locks, raw system calls only.

// kernelSigaction is the kernel's struct sigaction (amd64 and arm64 alike).
type kernelSigaction struct {
	handler, flags, restorer, mask uintptr
}

// childSignals is what runtime_AfterForkInChild does, without the runtime's
// memory (the g and m it reads are on heap pages the child was not given,
// see markNoFork): every signal with a handler (the runtime's) goes back to
// its default action, ignored ones stay ignored, and the signals
// runtime_BeforeFork blocked are unblocked.
//
//go:nosplit
//go:norace
//go:nocheckptr
func childSignals() {
	var old, dfl kernelSigaction
	for sig := uintptr(1); sig <= 64; sig++ {
		if sig == uintptr(syscall.SIGKILL) || sig == uintptr(syscall.SIGSTOP) {
			continue
		}
		old = kernelSigaction{}
		_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0)
		if e == 0 && old.handler > 1 { // neither SIG_DFL (0) nor SIG_IGN (1)
			syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		}
	}
	var none uint64
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&none)), 0, 8, 0, 0)
}

//go:nosplit
//go:norace
//go:nocheckptr
func childMain(f *frame) {
	childStart(f)
	childRun(f)
}

// childStart names the child, arms its parent-death signal and waits for
// its maps.
//
//go:nosplit
//go:norace
//go:nocheckptr
func childStart(f *frame) {
	if f.name != nil {
		syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(f.name)), 0)
	}
	if f.pdeath != 0 {
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, f.pdeath, 0); e != 0 {
			exit(125)
		}
	}
	if f.synced {
		// Wait until the parent has written the maps; EOF means it gave up.
		syscall.RawSyscall(syscall.SYS_CLOSE, f.syncW, 0, 0)
		var b [1]byte
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, f.syncR, uintptr(unsafe.Pointer(&b[0])), 1)
		if e != 0 || n != 1 {
			exit(125)
		}
	}
}

// childRun places the descriptors, runs the steps and becomes the init.
//
//go:nosplit
//go:norace
//go:nocheckptr
func childRun(f *frame) {
	if !f.marked { // the fork gave it none of f.drop otherwise
		dropShared(&f.drop, f.ndrop, f.pageMask, f.tp)
	}
	placeFiles(f)
	runSteps(f)
	// The steps' own descriptors go before the program starts: the init
	// keeps only its status (and a feed's FIFO, until the feeder has it).
	if fd := f.feedFD; fd != 0 {
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 4, fd-1, 0)
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, fd+1, ^uintptr(0), 0)
	} else {
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 4, ^uintptr(0), 0)
	}
	if f.direct {
		execDirect(f)
	}
	runInit(f)
}

// execDirect becomes the program (Program.Direct); it returns only to exit.
//
//go:nosplit
//go:norace
//go:nocheckptr
func execDirect(f *frame) {
	f.rec[0] = KindStarted
	syscall.RawSyscall(syscall.SYS_WRITE, 3, uintptr(unsafe.Pointer(&f.rec[0])), 1)
	_, _, e := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(f.path)), uintptr(unsafe.Pointer(f.argv)),
		uintptr(unsafe.Pointer(f.envv)))
	reportFailed(f, uint32(f.nops), uint32(e), 0, f.path, f.npath)
	exit(127)
}

// placeFiles moves the descriptors to 0, 1, ... (3, the status, and the
// extra ones close-on-exec) and closes every other one the child inherited.
//
//go:nosplit
//go:norace
//go:nocheckptr
func placeFiles(f *frame) {
	for i := uintptr(0); i < f.nfds && i < maxFiles; i++ {
		r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, f.fds[i], syscall.F_DUPFD_CLOEXEC, f.high)
		if e != 0 {
			exit(125)
		}
		f.fds[i] = r
	}
	for i := uintptr(0); i < f.nfds && i < maxFiles; i++ {
		flag := uintptr(0)
		if i >= 3 {
			flag = syscall.O_CLOEXEC
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_DUP3, f.fds[i], i, flag); e != 0 {
			exit(125)
		}
	}
	if _, _, e := syscall.RawSyscall(unix.SYS_CLOSE_RANGE, f.nfds, ^uintptr(0), 0); e != 0 {
		exit(125)
	}
}

// runSteps interprets the Prog; the first failing step is reported and
// ends the child.
//
//go:nosplit
//go:norace
//go:nocheckptr
func runSteps(f *frame) {
	for i := uintptr(0); i < f.nops; i++ {
		o := (*op)(unsafe.Add(unsafe.Pointer(f.ops), i*unsafe.Sizeof(op{})))
		var a [6]uintptr
		for j := 0; j < 6; j++ {
			a[j] = o.arg[j]
			if s := o.from[j]; s >= 0 {
				a[j] = f.slots[s&(maxSlots-1)]
			}
		}
		switch o.kind {
		case opStore:
			*(*int32)(o.at) = int32(a[1])
			continue
		case opIfOK:
			if int(a[0]) < 0 {
				i += o.skip
			}
			continue
		}
		r, _, e := syscall.RawSyscall6(o.trap, a[0], a[1], a[2], a[3], a[4], a[5])
		if e == 0 && o.wantOK && r != o.want {
			e = syscall.EIO
		}
		if e != 0 && uintptr(e) != o.okErr {
			reportFailed(f, uint32(i), uint32(e), o.tag, o.what, o.nwhat)
			exit(125)
		}
		if f.pdeath != 0 && changesCreds(o.trap) {
			rearmPdeath(f)
		}
		if o.save >= 0 {
			f.slots[o.save&(maxSlots-1)] = r
		}
	}
}

// changesCreds reports whether trap may change the child's ids or raise
// its capabilities: the kernel then clears the parent-death signal
// (commit_creds), which a helper that starts as the server's uid and
// takes the block's would otherwise live on without.
//
//go:nosplit
func changesCreds(trap uintptr) bool {
	switch trap {
	case syscall.SYS_SETUID, syscall.SYS_SETGID, syscall.SYS_SETREUID, syscall.SYS_SETREGID,
		syscall.SYS_SETRESUID, syscall.SYS_SETRESGID, syscall.SYS_SETFSUID, syscall.SYS_SETFSGID, syscall.SYS_CAPSET:
		return true
	}
	return false
}

// rearmPdeath arms the parent-death signal again after a step that may
// have cleared it, and ends the child when its caller died before that:
// the signal was then sent to nobody. getppid cannot tell (the parent is
// outside the child's PID namespace, so it reads 0 either way); the
// status descriptor can: its reader is the process the signal stands for,
// whose descriptors close before the kernel sends the parent-death signal
// (do_exit releases the files before exit_notify), so a reader still
// there means the signal is still to come. POLLERR is a pipe without readers; POLLHUP a socket whose
// peer is gone.
//
//go:nosplit
//go:norace
//go:nocheckptr
func rearmPdeath(f *frame) {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, f.pdeath, 0); e != 0 {
		exit(125)
	}
	pfd := unix.PollFd{Fd: 3}
	var now unix.Timespec
	n, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&now)), 0, 0, 0)
	if e == 0 && n == 1 && pfd.Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
		exit(125)
	}
}

// vforkExec is in vfork_linux_*.s: a vfork child shares this stack, so it
// must not return into Go code (it would overwrite the frames the init
// resumes on).
func vforkExec(path, argv, envv, errp uintptr) (pid, errno uintptr)

// runInit starts the program (vfork, so nothing is copied), reports it,
// reaps until it has ended, ends whatever it left in the namespace, reports
// its wait status and exits like it.
//
//go:nosplit
//go:norace
//go:nocheckptr
func runInit(f *frame) {
	if f.hold != 0 {
		catch(f.hold)
	}
	if f.feedFD != 0 {
		startFeeder(f)
	}
	if f.pinPID > 2 {
		pinPID(f)
	}
	pid, e := vforkExec(uintptr(unsafe.Pointer(f.path)), uintptr(unsafe.Pointer(f.argv)),
		uintptr(unsafe.Pointer(f.envv)), uintptr(unsafe.Pointer(&f.execErr)))
	if e != 0 {
		reportFailed(f, uint32(f.nops), uint32(e), 0, f.path, f.npath)
		exit(125)
	}
	if f.execErr != 0 {
		// vfork: the program's exec failed before this resumed. It has
		// exited (127); reap it and end as the Go helper does.
		reportFailed(f, uint32(f.nops), uint32(f.execErr), 0, f.path, f.npath)
		reapUntil(pid, false)
		exit(127)
	}
	// The init gives up the program's descriptors before it says Started:
	// a program that closes its stdout gives its reader EOF, as without an
	// init, and a reader of Started sees the init as it stays.
	for fd := uintptr(0); fd < 3; fd++ {
		syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
	}
	report(&f.rec, KindStarted, uint32(pid))
	dropShared(&f.later, f.nlater, f.pageMask, f.tp)
	ws := reapUntil(pid, f.hold != 0)
	self, _, _ := syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
	if self == 1 {
		// kill(-1) from a namespace's init spares only the init. Never from
		// anything else: it would signal every process the caller may.
		syscall.RawSyscall(syscall.SYS_KILL, ^uintptr(0), uintptr(syscall.SIGKILL), 0)
		for {
			var st int32
			_, _, e := syscall.RawSyscall6(syscall.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&st)), 0, 0, 0, 0)
			if e != 0 && e != syscall.EINTR {
				break // ECHILD: only the init is left
			}
		}
	}
	report(&f.rec, KindWaited, ws)
	for f.hold != 0 {
		// Holds until killed; the signal it catches only interrupts this.
		syscall.RawSyscall6(syscall.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
	}
	st := syscall.WaitStatus(ws)
	if st.Signaled() {
		exit(128 + uintptr(st&0x7f))
	}
	exit(uintptr(ws>>8) & 0xff)
}

// reapUntil reaps every child until pid has ended and returns its status;
// with hold, a wait the hold signal interrupts ends every other process of
// the namespace first.
//
//go:nosplit
//go:norace
//go:nocheckptr
func reapUntil(pid uintptr, hold bool) uint32 {
	for {
		var st int32
		r, _, e := syscall.RawSyscall6(syscall.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&st)), 0, 0, 0, 0)
		if e == 0 && r == pid {
			return uint32(st)
		}
		if e == syscall.EINTR && hold {
			// The hold signal (nothing else is caught): end the namespace but the init.
			syscall.RawSyscall(syscall.SYS_KILL, ^uintptr(0), uintptr(syscall.SIGKILL), 0)
		}
		if e != 0 && e != syscall.EINTR {
			return 127 << 8 // ECHILD cannot happen while pid is unreaped; never spin
		}
	}
}

// catch gives sig a handler that does nothing (nopSignalAddrs), without
// SA_RESTART: it interrupts the init's wait. A PID-namespace init receives
// from outside its namespace only the signals it catches (and SIGKILL), and
// from inside none it does not; the program's exec resets it to the default.
//
//go:nosplit
//go:norace
//go:nocheckptr
func catch(sig uintptr) {
	h, r := nopSignalAddrs()
	const saRestorer = 0x04000000
	act := kernelSigaction{handler: h, flags: saRestorer, restorer: r, mask: ^uintptr(0)}
	syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
}

func nopSignalAddrs() (handler, restorer uintptr)

// report writes a Started or Waited record: kind, then a (little-endian;
// amd64 and arm64 only).
//
//go:nosplit
//go:norace
//go:nocheckptr
func report(rec *[failHeader]byte, kind byte, a uint32) {
	rec[0] = kind
	put32(rec[1:5], a)
	syscall.RawSyscall(syscall.SYS_WRITE, 3, uintptr(unsafe.Pointer(&rec[0])), 5)
}

// reportFailed writes a failure record: the header, then what the step did.
// Two writes: only the child writes on the descriptor, and it exits next.
//
//go:nosplit
//go:norace
//go:nocheckptr
func reportFailed(f *frame, step, errno, tag uint32, what *byte, nwhat uintptr) {
	rec := &f.rec
	rec[0] = KindFailed
	put32(rec[1:5], step)
	put32(rec[5:9], errno)
	put32(rec[9:13], tag)
	rec[13], rec[14] = byte(nwhat), byte(nwhat>>8)
	// RawSyscall6, not RawSyscall: one frame less on the deepest nosplit
	// chain (idleMain ... forkInit, reportFailed), which arm64's linker
	// otherwise finds 8 bytes over the nosplit stack limit.
	syscall.RawSyscall6(syscall.SYS_WRITE, 3, uintptr(unsafe.Pointer(&rec[0])), failHeader, 0, 0, 0)
	if nwhat > 0 {
		syscall.RawSyscall6(syscall.SYS_WRITE, 3, uintptr(unsafe.Pointer(what)), nwhat, 0, 0, 0)
	}
}

//go:nosplit
func put32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

//go:nosplit
//go:norace
func exit(code uintptr) {
	for {
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, code, 0, 0)
	}
}
