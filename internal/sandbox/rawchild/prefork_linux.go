//go:build linux && (amd64 || arm64)

package rawchild

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A child forked ahead of its program (Prefork) is a copy of its parent: a
// Prog's ops, arena and frame that existed when it was forked are at the
// same addresses in it. So a program compiled later into that same memory
// needs no relocation: Run sends the bytes, the child reads them into its
// copy of the same places, and goes on as a child from Start would. What
// moves off the caller's path is the clone (namespace creation, the copy of
// the page tables) and the maps.

// maxChunks bounds the arena chunks a pre-forked child can receive.
const maxChunks = 8

// handHeader is what Run sends first, with the descriptors attached: how
// many bytes of the ops array and of each chunk follow (then the frame).
type handHeader struct {
	opsLen   uintptr
	nchunks  uintptr
	chunkLen [maxChunks]uintptr
}

// idleFrame is a pre-forked child's own memory until its program arrives.
type idleFrame struct {
	start    frame // childStart's fields only (name, parent-death signal, maps)
	sock     uintptr
	hdr      handHeader
	cmsg     [64]byte
	iov      syscall.Iovec
	msg      syscall.Msghdr
	opsBase  *op
	chunks   [maxChunks]*byte
	nchunks  uintptr
	fr       *frame // where the program's frame arrives (the Prog's)
	received [maxFiles]int32
	drop     [maxDrop]memRange // the caller's memory it lets go of while it waits
	ndrop    uintptr
	nofork   [maxDrop]memRange // what it is never given: drop but the Prog's memory (see markNoFork)
	nnofork  uintptr
	wipe     [maxDrop]memRange // the Prog's memory, given as zero pages (markWipe)
	nwipe    uintptr
	pageMask uintptr
	tp       uintptr  // its thread pointer (adviseOutside)
	marked   bool     // nofork and wipe were marked whole for the fork
	name     [16]byte // its name until it runs (PR_SET_NAME keeps 15 bytes)
	unshare  uintptr  // Attr.IdleUnshare
}

// Idle is a child forked ahead of its program: in its namespaces, its maps
// written, waiting for Run. It is the caller's (or, with Attr.Parent, the
// caller's parent's) child, to reap whether it runs a program or not.
type Idle struct {
	PID    int
	pidfd  int // Close signals through it: the PID may be reaped (and reused) by another
	sock   int
	prog   *Prog
	ops    *op // p's ops array at the fork
	opsCap int
	chunks [maxChunks]*byte
	n      int
	pdeath syscall.Signal
}

// ErrStale is Run's answer when the Prog's memory has moved since the idle
// child was forked (its ops outgrew their array, or it took a new arena
// chunk): the child cannot see the program. Nothing was sent; Close it.
var ErrStale = errors.New("rawchild: the program's memory is not the pre-forked child's")

// Prefork forks a child for a program p will hold later, with a's
// namespaces, maps, parent-death signal, name (until it runs) and Parent;
// its descriptors come with Run. p must have been built once already (its
// memory is what the child will see); UseCgroupFD is refused (the block's
// group is not known yet: join it in a step).
func Prefork(p *Prog, a Attr) (*Idle, error) {
	if a.UseCgroupFD {
		return nil, errors.New("rawchild: a pre-forked child cannot be cloned into its cgroup")
	}
	if cap(p.ops) == 0 || len(p.chunks) == 0 || len(p.chunks) > maxChunks || p.fr == nil {
		return nil, errors.New("rawchild: Prefork needs a Prog built once (its memory is the child's)")
	}
	if err := checkMaps(a); err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("rawchild: socket pair: %w", err)
	}
	d := &idleFrame{sock: uintptr(pair[1]), opsBase: &p.ops[:1][0], fr: p.fr, nchunks: uintptr(len(p.chunks))}
	d.iov.Base = (*byte)(unsafe.Pointer(&d.hdr))
	d.msg.Iov, d.msg.Control = &d.iov, &d.cmsg[0]
	d.start.pdeath, d.unshare = uintptr(a.Pdeathsig), a.IdleUnshare
	if a.Name != "" {
		copy(d.name[:len(d.name)-1], a.Name)
		d.start.name = &d.name[0]
	}
	idle := &Idle{sock: pair[0], prog: p, ops: d.opsBase, opsCap: cap(p.ops), n: len(p.chunks), pdeath: a.Pdeathsig}
	// Everything it has of the caller's but d: the program arrives into
	// pages it no longer has (fresh ones, then), and the caller's writes
	// while it waits do not copy pages for it.
	self := span(unsafe.Pointer(d), unsafe.Sizeof(*d))
	d.ndrop, d.pageMask = planRanges(&d.drop, subtractAll(anonRanges(), []memRange{self}))
	// The program arrives into the Prog's memory (fresh pages, once
	// dropped), so the child must have those ranges mapped.
	prog := []memRange{span(unsafe.Pointer(p.fr), unsafe.Sizeof(*p.fr)),
		span(unsafe.Pointer(&p.ops[:1][0]), uintptr(cap(p.ops))*unsafe.Sizeof(op{}))}
	for i, c := range p.chunks {
		d.chunks[i], idle.chunks[i] = &c[0], &c[0]
		prog = append(prog, span(unsafe.Pointer(&c[0]), uintptr(len(c))))
	}
	d.nnofork, _ = planRanges(&d.nofork, subtractAll(anonRanges(), append(prog, self)))
	// Not the pages d shares with them (it is read before the program arrives).
	d.nwipe, _ = planRanges(&d.wipe, subtractAll(prog, []memRange{self}))
	flags := cloneFlags(a)
	pid, err := cloneWithMaps(&d.start, a, func() (uintptr, syscall.Errno) { return forkIdle(d, flags) })
	runtime.KeepAlive(d)
	unix.Close(pair[1])
	if err != nil {
		unix.Close(pair[0])
		return nil, err
	}
	if idle.pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL) // alive and unreaped: the PID is still the child's
		unix.Close(pair[0])
		return nil, fmt.Errorf("rawchild: pidfd of the pre-forked child: %w", err)
	}
	idle.PID = pid
	return idle, nil
}

// Run hands the idle child the program p holds (built after the fork, in
// the same memory), prog and its descriptors (as Attr's Stdin, Stdout,
// Stderr, Status and Extra, in that order). The child then runs as one
// from Start; its PID is idle.PID.
func (idle *Idle) Run(p *Prog, prog Program, name string, files []FD) error {
	if idle.sock < 0 {
		return errors.New("rawchild: the idle child was used or closed")
	}
	if p != idle.prog || p.err != nil {
		return errors.Join(errors.New("rawchild: Run needs the Prog the child was forked for"), p.err)
	}
	if len(files) < 4 || len(files) > maxFiles {
		return fmt.Errorf("rawchild: %d descriptors (stdin, stdout, stderr, status, extra: 4 to %d)", len(files), maxFiles)
	}
	f, err := newFrame(p, prog, files, idle.pdeath, name)
	if err != nil {
		return err
	}
	if len(p.ops) == 0 || &p.ops[0] != idle.ops || cap(p.ops) != idle.opsCap || len(p.chunks) > idle.n || p.cur >= idle.n {
		return ErrStale
	}
	var hdr handHeader
	bufs := [][]byte{unsafe.Slice((*byte)(unsafe.Pointer(&p.ops[0])), uintptr(len(p.ops))*unsafe.Sizeof(op{}))}
	for i := 0; i <= p.cur; i++ {
		if &p.chunks[i][0] != idle.chunks[i] {
			return ErrStale
		}
		used := len(p.chunks[i])
		if i == p.cur {
			used = p.used
		}
		hdr.chunkLen[i] = uintptr(used)
		bufs = append(bufs, p.chunks[i][:used])
	}
	hdr.opsLen, hdr.nchunks = uintptr(len(bufs[0])), uintptr(p.cur+1)
	bufs = append(bufs, unsafe.Slice((*byte)(unsafe.Pointer(f)), unsafe.Sizeof(frame{})))
	fds := make([]int, len(files))
	for i, file := range files {
		fds[i] = int(file.Fd())
	}
	sock := idle.sock
	idle.sock = -1
	unix.Close(idle.pidfd)
	defer unix.Close(sock)
	hb := unsafe.Slice((*byte)(unsafe.Pointer(&hdr)), unsafe.Sizeof(hdr))
	if err := unix.Sendmsg(sock, hb, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("rawchild: hand the program over: %w", err)
	}
	for _, b := range bufs {
		for len(b) > 0 {
			n, err := unix.SendmsgN(sock, b, nil, nil, unix.MSG_NOSIGNAL)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("rawchild: hand the program over: %w", err)
			}
			b = b[n:]
		}
	}
	runtime.KeepAlive(files)
	return nil
}

// Close ends an idle child that will not run: it is killed (the caller
// reaps it). A child that Run reached is not touched.
func (idle *Idle) Close() {
	if idle.sock >= 0 {
		// First: so that it never runs on to an EOF of its own.
		_ = unix.PidfdSendSignal(idle.pidfd, unix.SIGKILL, nil, 0)
		unix.Close(idle.pidfd)
		unix.Close(idle.sock)
		idle.sock = -1
	}
}

// CloseWait is Close, then waits up to d until the child has ended (it
// is then a zombie for its parent to reap).
func (idle *Idle) CloseWait(d time.Duration) {
	if idle.sock < 0 {
		return
	}
	pidfd, err := unix.Dup(idle.pidfd)
	idle.Close()
	if err != nil {
		return
	}
	defer unix.Close(pidfd)
	pfd := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		if _, err := unix.Poll(pfd, int(time.Until(deadline).Milliseconds())+1); err != unix.EINTR {
			return
		}
	}
}

//go:noinline
//go:norace
//go:nocheckptr
func forkIdle(d *idleFrame, flags uintptr) (uintptr, syscall.Errno) {
	runtime_BeforeFork()
	d.tp = forkTP()
	d.marked = markNoFork(&d.nofork, d.nnofork, d.pageMask, d.tp) // the child's copy has it too
	d.marked = markWipe(&d.wipe, d.nwipe, d.pageMask, d.tp) && d.marked
	pid, _, errno := syscall.RawSyscall6(syscall.SYS_CLONE, flags|uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if errno != 0 || pid != 0 {
		unmarkWipe(&d.wipe, d.nwipe, d.pageMask, d.tp)
		unmarkNoFork(&d.nofork, d.nnofork, d.pageMask, d.tp)
		runtime_AfterFork()
		return pid, errno
	}
	childSignals()
	idleMain(d)
	return 0, 0 // not reached
}

// idleMain waits for the program and runs it; EOF (the parent closed the
// socket: Close, or its own end) ends the child quietly.
//
//go:nosplit
//go:norace
//go:nocheckptr
func idleMain(d *idleFrame) {
	childStart(&d.start)
	if d.unshare != 0 {
		if _, _, e := syscall.RawSyscall(syscall.SYS_UNSHARE, d.unshare, 0, 0); e != 0 {
			exit(125)
		}
	}
	// Nothing but the socket, at 0, until the block's descriptors arrive.
	if _, _, e := syscall.RawSyscall(syscall.SYS_DUP3, d.sock, 0, 0); e != 0 {
		exit(125)
	}
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 1, ^uintptr(0), 0)
	if !d.marked { // nofork and wipe are drop, split by what the fork left out and what it gave as zero pages
		dropShared(&d.drop, d.ndrop, d.pageMask, d.tp)
	}
	nfds := receiveHeader(d)
	if !readAll(uintptr(unsafe.Pointer(d.opsBase)), d.hdr.opsLen) {
		exit(125)
	}
	for i := uintptr(0); i < d.hdr.nchunks && i < maxChunks && i < d.nchunks; i++ {
		if !readAll(uintptr(unsafe.Pointer(d.chunks[i])), d.hdr.chunkLen[i]) {
			exit(125)
		}
	}
	f := d.fr
	if !readAll(uintptr(unsafe.Pointer(f)), unsafe.Sizeof(frame{})) {
		exit(125)
	}
	// The frame arrived with the parent's descriptor numbers: the received
	// ones replace them (the socket at 0 goes when placeFiles fills 0).
	if nfds != f.nfds {
		exit(125)
	}
	f.high = 4
	for i := uintptr(0); i < nfds && i < maxFiles; i++ {
		f.fds[i] = uintptr(d.received[i])
		f.high = max(f.high, f.fds[i]+1, nfds)
	}
	f.synced = false
	f.tp = d.tp // the frame came with the caller's thread's
	if f.name != nil {
		syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(f.name)), 0)
	}
	childRun(f)
}

// receiveHeader reads the hand-over's header and its descriptors (into
// d.received); it returns how many arrived. EOF before it ends the child.
//
//go:nosplit
//go:norace
//go:nocheckptr
func receiveHeader(d *idleFrame) uintptr {
	// Its pointers were set by Prefork: a pointer store here would read
	// the runtime's write-barrier flag, on a page the child does not have.
	d.iov.Len = uint64(unsafe.Sizeof(d.hdr))
	d.msg.Iovlen = 1
	d.msg.Controllen = uint64(len(d.cmsg))
	var n uintptr
	var e syscall.Errno
	for {
		n, _, e = syscall.RawSyscall(syscall.SYS_RECVMSG, 0, uintptr(unsafe.Pointer(&d.msg)), syscall.MSG_CMSG_CLOEXEC)
		if e != syscall.EINTR {
			break
		}
	}
	if e != 0 || n == 0 {
		exit(0) // the parent gave the child up
	}
	// One SCM_RIGHTS message: struct cmsghdr {u64 len; i32 level, type} and the descriptors.
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&d.cmsg[0]))
	if d.msg.Controllen < syscall.SizeofCmsghdr || h.Level != syscall.SOL_SOCKET || h.Type != syscall.SCM_RIGHTS {
		exit(125)
	}
	nfds := (uintptr(h.Len) - syscall.SizeofCmsghdr) / 4
	for i := uintptr(0); i < nfds && i < maxFiles; i++ {
		d.received[i] = *(*int32)(unsafe.Add(unsafe.Pointer(&d.cmsg[0]), syscall.SizeofCmsghdr+4*i))
	}
	if !readAll(uintptr(unsafe.Pointer(&d.hdr))+n, unsafe.Sizeof(d.hdr)-n) {
		exit(125)
	}
	return min(nfds, maxFiles)
}

// readAll reads exactly n bytes from descriptor 0 to address at.
//
//go:nosplit
//go:norace
//go:nocheckptr
func readAll(at, n uintptr) bool {
	for n > 0 {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, 0, at, n)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 || r == 0 {
			return false
		}
		at, n = at+r, n-r
	}
	return true
}
