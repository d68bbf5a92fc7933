//go:build linux && (amd64 || arm64)

package rawchild

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Feed is a stream the init keeps writing into a FIFO for as long as the
// block lives: the ChaCha20 keystream (RFC 8439, all-zero nonce) of a key,
// from State, the cipher's state at block 0 (ChaChaState). FD is the FIFO's
// read-write descriptor as the steps left it; the init hands it to a
// feeder, a fork of its own, and closes its copy (a dead feeder then gives
// readers end of file, not a hang).
type Feed struct {
	FD    int
	State [16]uint32
}

// feedChunk is how much keystream the feeder makes per write: a pipe's
// default capacity, so that a full pipe is refilled in one write.
const feedChunk = 64 << 10

// ChaChaState is the ChaCha20 state of a 32-byte key at block 0.
func ChaChaState(key [32]byte) [16]uint32 {
	st := [16]uint32{0x61707865, 0x3320646e, 0x79622d32, 0x6b206574}
	for i := range 8 {
		st[4+i] = uint32(key[4*i]) | uint32(key[4*i+1])<<8 | uint32(key[4*i+2])<<16 | uint32(key[4*i+3])<<24
	}
	return st
}

// startFeeder forks the feeder (a plain fork of the init, which holds
// nothing but its frame) and closes the init's descriptor of the FIFO.
//
//go:nosplit
//go:norace
//go:nocheckptr
func startFeeder(f *frame) {
	// On this stack, not in the frame: an init forked ahead (Prefork) has
	// its frame in memory its own forks get as zero pages.
	fd, st := f.feedFD, f.feedState
	if forkInit(f, "fork the random feeder") == 0 {
		feed(fd, &st)
	}
	syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0)
}

// feed is the feeder's whole life: every signal blocked, only the FIFO
// open (the block's stdio and the status pipe must not outlive the program
// here), then keystream written until a write fails.
//
//go:nosplit
//go:norace
//go:nocheckptr
func feed(fd uintptr, st *[16]uint32) {
	all := ^uint64(0)
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), 0, 8, 0, 0)
	if fd > 0 {
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, fd-1, 0)
	}
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, fd+1, ^uintptr(0), 0)
	at, _, e := syscall.RawSyscall6(syscall.SYS_MMAP, 0, feedChunk, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS, ^uintptr(0), 0)
	if e != 0 {
		exit(0)
	}
	buf := (*[feedChunk]byte)(unsafe.Add(nil, at)) // a mapping of this process's own
	for {
		for off := 0; off < feedChunk; off += 64 {
			chachaBlockTo(st, buf, off)
		}
		for off := 0; off < feedChunk; {
			n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Add(unsafe.Pointer(buf), off)), uintptr(feedChunk-off))
			if e == syscall.EINTR {
				continue
			}
			if e != 0 || n == 0 {
				exit(0)
			}
			off += int(n)
		}
	}
}

// chachaBlockTo writes the block of st's counter at out[off:off+64] (off a
// multiple of 64) and advances the counter. No bounds checks: a nosplit
// chain this deep has no stack left for a panic's.
//
//go:nosplit
//go:nocheckptr
func chachaBlockTo(in *[16]uint32, out *[feedChunk]byte, off int) {
	x := *in
	for range 10 {
		qr(&x[0], &x[4], &x[8], &x[12])
		qr(&x[1], &x[5], &x[9], &x[13])
		qr(&x[2], &x[6], &x[10], &x[14])
		qr(&x[3], &x[7], &x[11], &x[15])
		qr(&x[0], &x[5], &x[10], &x[15])
		qr(&x[1], &x[6], &x[11], &x[12])
		qr(&x[2], &x[7], &x[8], &x[13])
		qr(&x[3], &x[4], &x[9], &x[14])
	}
	at := unsafe.Add(unsafe.Pointer(out), off&(feedChunk-64))
	for i := range 16 {
		// Little-endian, as ChaCha20's output is: amd64 and arm64 store it so.
		*(*uint32)(unsafe.Add(at, 4*i)) = x[i&15] + in[i&15]
	}
	in[12]++
}

// qr is ChaCha20's quarter round on *a, *b, *c, *d.
//
//go:nosplit
func qr(a, b, c, d *uint32) {
	*a += *b
	*d = rotl(*d^*a, 16)
	*c += *d
	*b = rotl(*b^*c, 12)
	*a += *b
	*d = rotl(*d^*a, 8)
	*c += *d
	*b = rotl(*b^*c, 7)
}

//go:nosplit
func rotl(v uint32, n uint) uint32 { return v<<n | v>>(32-n) }

// forkInit forks the init (0 in the child, its PID in the init); a fork
// that fails is reported as the init's failure, what, and ends it.
//
//go:nosplit
//go:norace
//go:nocheckptr
func forkInit(f *frame, what string) uintptr {
	r, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		reportFailed(f, uint32(f.nops), uint32(e), f.initTag, unsafe.StringData(what), uintptr(len(what)))
		exit(125)
	}
	return r
}

// pinPID forks children that exit at once until the last one got pid-1,
// so that the program, forked next, is pid in its namespace: the init is
// the namespace's only other process (no threads), and PIDs there are
// handed out in order. Writing ns_last_pid or clone3's set_tid would need
// CAP_SYS_ADMIN, which the init no longer has.
//
//go:nosplit
//go:norace
//go:nocheckptr
func pinPID(f *frame) {
	for {
		r := forkInit(f, "fork to pin the program's pid")
		if r == 0 {
			exit(0)
		}
		var st int32
		for {
			_, _, e := syscall.RawSyscall6(syscall.SYS_WAIT4, r, uintptr(unsafe.Pointer(&st)), 0, 0, 0, 0)
			if e != syscall.EINTR {
				break
			}
		}
		if r >= f.pinPID-1 {
			if r >= f.pinPID {
				const what = "pin the program's pid: the namespace is past it"
				reportFailed(f, uint32(f.nops), uint32(syscall.EEXIST), f.initTag, unsafe.StringData(what), uintptr(len(what)))
				exit(125)
			}
			return
		}
	}
}
