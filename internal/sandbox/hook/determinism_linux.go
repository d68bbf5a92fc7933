//go:build linux

package hook

import (
	"runtime"
	"syscall"
	"unsafe"
)

// randomFIFO is the FIFO bound over /dev/urandom and /dev/random (-1:
// none yet), opened read-write by seededRandom while the helper can still
// make it, and handed to the feeder by startFeeder.
var randomFIFO = -1

// randomKey is the stream's key (Spec.Determ), kept for the feeder.
var randomKey []byte

// setupDeterminism makes the block reproducible (see package sandbox's
// Determinism for what each step covers). Step 1 runs before the root is
// built (newTimeNamespace), the rest after it (/dev/shm exists); all while
// the helper still holds CAP_SYS_ADMIN and CAP_SYS_TIME in its user
// namespace:
//
//  1. a time namespace for the program (CLONE_NEWTIME affects children and
//     the next exec only) whose monotonic and boot clocks start at zero;
//  2. /dev/urandom and /dev/random bound, read-only, to a FIFO that the
//     init's feeder fills with the ChaCha20 keystream of sp.Determ
//     (seededRandom, startFeeder): one stream for the whole block;
//  3. getrandom(2) fails with ENOSYS (a one-rule seccomp filter stacked
//     under the main one), so runtimes fall back to /dev/urandom;
//  4. ASLR off (personality ADDR_NO_RANDOMIZE, inherited by fork and exec);
//  5. umask 022.
func setupDeterminism(sp *Spec) error {
	if len(sp.Determ) != 32 {
		return &herr{"deterministic mode: seed key must be 32 bytes", nil}
	}
	if err := seededRandom(sp.Determ); err != nil {
		return err
	}
	if err := installSeccomp(GetrandomENOSYS(), sp.Init); err != nil {
		return wrap("deterministic mode: getrandom filter", err)
	}
	const addrNoRandomize = 0x0040000
	cur, _, _ := syscall.RawSyscall(syscall.SYS_PERSONALITY, 0xffffffff, 0, 0)
	if _, _, e := syscall.RawSyscall(syscall.SYS_PERSONALITY, (cur&0xffffffff)|addrNoRandomize, 0, 0); e != 0 {
		return wrap("deterministic mode: personality(ADDR_NO_RANDOMIZE)", e)
	}
	syscall.Umask(0o022)
	return nil
}

// newTimeNamespace is the first step of deterministic mode, run before
// the root is built: the time namespace's offsets go through the host's
// /proc (the block's own is mounted read-only).
func newTimeNamespace() error {
	if err := syscall.Unshare(syscall.CLONE_NEWTIME); err != nil {
		return wrap("deterministic mode: unshare time namespace", err)
	}
	if err := zeroClocks(); err != nil {
		return err
	}
	return zeroClocks()
}

// zeroClocks sets the offsets of the new time namespace (before any process
// is in it) so that CLOCK_MONOTONIC and CLOCK_BOOTTIME read zero now.
func zeroClocks() error {
	var buf []byte
	for _, c := range [...]struct {
		id   int
		name string
	}{{1, "1"}, {7, "7"}} { // CLOCK_MONOTONIC, CLOCK_BOOTTIME
		var ts syscall.Timespec
		if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, uintptr(c.id), uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
			return wrap("deterministic mode: clock_gettime", e)
		}
		// offset = -now, normalised so that 0 <= nsec < 1e9.
		sec, nsec := -ts.Sec, -ts.Nsec
		if nsec < 0 {
			sec, nsec = sec-1, nsec+1e9
		}
		buf = append(buf, c.name+" "+itoa(sec)+" "+itoa(nsec)+"\n"...)
	}
	// A non-dumpable process's /proc files belong to root, so the helper
	// is dumpable just for the open (nothing else is in its namespaces yet;
	// the write itself is checked against CAP_SYS_TIME).
	if e := prctl(syscall.PR_SET_DUMPABLE, 1); e != nil {
		return wrap("deterministic mode: set dumpable", e)
	}
	fd, err := syscall.Open("/proc/self/timens_offsets", syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if e := prctl(syscall.PR_SET_DUMPABLE, 0); e != nil {
		fail(MHelper, "set non-dumpable: ", e)
	}
	if err != nil {
		return wrap("deterministic mode: open /proc/self/timens_offsets", err)
	}
	defer syscall.Close(fd)
	return wrap("deterministic mode: write /proc/self/timens_offsets", writeAll(fd, buf))
}

// writeFakeTimeRC writes sp.FakeTimeRC as the root's /etc/faketimerc.
// libfaketime reads FAKETIME with getenv at a program's first clock call,
// and falls back to /etc/faketimerc when that finds nothing. bash exports
// its own getenv, which libfaketime binds to, and which answers only from
// bash's variable table: at bash's first clock read (shell_start_time, in
// main, before the environment is imported) that table is empty, so
// without the file libfaketime decides not to fake and caches that
// (measured: $EPOCHSECONDS, printf %(...)T and the gettimeofday half of
// $RANDOM's seed were the real time when bash was the first preloaded
// process, and faked with the file).
func writeFakeTimeRC(root string, sp *Spec) error {
	if len(sp.FakeTimeRC) == 0 {
		return nil
	}
	return wrap("build root filesystem: write /etc/faketimerc", writeFile(root+"/etc/faketimerc", sp.FakeTimeRC, 0o444))
}

// seededRandom makes /dev/urandom and /dev/random one seeded stream: a
// FIFO, made in /dev/shm (a tmpfs of this mount namespace, so it can be
// bound) and unlinked at once, bound read-only over both. The helper keeps
// a read-write descriptor of it (close-on-exec, so the program never holds
// the write end; read-write, so it never blocks on open) for the init's
// feeder (startFeeder), which writes the ChaCha20 keystream of key into it
// for as long as the block lives. Every open of either device, by any
// process of the block, reads on from where the last read stopped. The
// FIFO is 0444: the program's uid may not write into the stream.
func seededRandom(key []byte) error {
	const tmp = "/dev/shm/.codellm-random"
	if err := syscall.Mkfifo(tmp, 0o600); err != nil {
		return wrap("deterministic mode: mkfifo "+tmp, err)
	}
	defer syscall.Unlink(tmp)
	fd, err := syscall.Open(tmp, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return wrap("deterministic mode: open "+tmp, err)
	}
	// Read-only for everyone once the helper holds its write end.
	if err := syscall.Fchmod(fd, 0o444); err != nil {
		syscall.Close(fd)
		return wrap("deterministic mode: chmod "+tmp, err)
	}
	for _, dev := range [...]string{"/dev/urandom", "/dev/random"} {
		if err := syscall.Mount(tmp, dev, "", syscall.MS_BIND, ""); err != nil {
			syscall.Close(fd)
			return wrap("deterministic mode: bind seeded stream on "+dev, err)
		}
		if err := syscall.Mount("", dev, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
			syscall.Close(fd)
			return wrap("deterministic mode: remount "+dev+" read-only", err)
		}
	}
	randomFIFO, randomKey = fd, key
	return nil
}

// feedChunk is how much keystream the feeder makes per write: a pipe's
// default capacity, so a full pipe is refilled in one write.
const feedChunk = 64 << 10

// startFeeder forks the feeder, a child of the init that writes the
// keystream into the random FIFO until it is killed with the namespace,
// then closes the init's own descriptor of it (a dead feeder then gives
// readers EOF, not a hang). It runs before the PID pin, so the feeder's
// PID is part of the fixed sequence. The child is a raw fork of this
// thread: it runs only feed, which allocates nothing and makes no call
// that could grow the stack or enter the scheduler.
func startFeeder() error {
	if randomFIFO < 0 {
		return &herr{"deterministic mode: no seeded random stream to feed", nil}
	}
	st := new([16]uint32)
	chachaInit(st, randomKey)
	buf := new([feedChunk]byte)
	r, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return wrap("deterministic mode: fork the random feeder", e)
	}
	if r == 0 {
		feed(randomFIFO, st, buf)
	}
	syscall.Close(randomFIFO)
	randomFIFO = -1
	return nil
}

// feed is the feeder's whole life: block every signal (the Go runtime's
// handlers do not exist in this child), keep only the FIFO open (the
// block's stdio and the status pipe must not outlive the program here),
// then write keystream until a write fails, and exit.
//
//go:nosplit
func feed(fd int, st *[16]uint32, buf *[feedChunk]byte) {
	all := ^uint64(0)
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, 2 /* SIG_SETMASK */, uintptr(unsafe.Pointer(&all)), 0, 8, 0, 0)
	if fd > 0 {
		syscall.RawSyscall(sysCloseRange, 0, uintptr(fd-1), 0)
	}
	syscall.RawSyscall(sysCloseRange, uintptr(fd+1), ^uintptr(0), 0)
	for {
		for off := 0; off < feedChunk; off += 64 {
			chachaBlockTo(st, buf, off)
		}
		for off := 0; off < feedChunk; {
			n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&buf[off])), uintptr(feedChunk-off))
			if e == syscall.EINTR {
				continue
			}
			if e != 0 || n == 0 {
				syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
			}
			off += int(n)
		}
	}
}

// GetrandomENOSYS is a classic-BPF filter: getrandom → ENOSYS, all else
// allowed (the main filter, stacked with it, still decides the rest; the
// stricter action wins, and non-native ABIs are killed there).
func GetrandomENOSYS() []byte {
	const (
		ldAbsW  = 0x20 // BPF_LD|BPF_W|BPF_ABS
		jeqK    = 0x15 // BPF_JMP|BPF_JEQ|BPF_K
		retK    = 0x06 // BPF_RET|BPF_K
		retErr  = 0x00050000
		retOK   = 0x7fff0000
		enosys  = 38
		dataNr  = 0
		skipOne = 1
	)
	ins := [...]struct {
		code   uint16
		jt, jf uint8
		k      uint32
	}{
		{ldAbsW, 0, 0, dataNr},
		{jeqK, 0, skipOne, sysGetrandom},
		{retK, 0, 0, retErr | enosys},
		{retK, 0, 0, retOK},
	}
	var b []byte
	for _, in := range ins {
		b = append(b, byte(in.code), byte(in.code>>8), in.jt, in.jf,
			byte(in.k), byte(in.k>>8), byte(in.k>>16), byte(in.k>>24))
	}
	return b
}

// ChaCha20 fills out with the ChaCha20 keystream (RFC 8439) of key under
// an all-zero nonce, block counter from 0 (len(out) a multiple of 64). It
// is the only cipher the helper needs, written out so that this package
// imports no crypto (see the package comment on start-up cost), and so
// that the feeder can run it in a raw fork (nosplit, no allocation).
func ChaCha20(key []byte, out []byte) {
	var st [16]uint32
	chachaInit(&st, key)
	blk := new([feedChunk]byte)
	for off := 0; off < len(out); off += 64 {
		chachaBlockTo(&st, blk, 0)
		copy(out[off:], blk[:64])
	}
}

// chachaInit sets st to the state of key at block 0.
func chachaInit(st *[16]uint32, key []byte) {
	*st = [16]uint32{0x61707865, 0x3320646e, 0x79622d32, 0x6b206574}
	for i := 0; i < 8; i++ {
		st[4+i] = le32(key[4*i:])
	}
}

// chachaBlockTo writes the block of st's counter at out[off:off+64] and
// advances the counter.
//
//go:nosplit
func chachaBlockTo(in *[16]uint32, out *[feedChunk]byte, off int) {
	x := *in
	for i := 0; i < 10; i++ {
		qr(&x, 0, 4, 8, 12)
		qr(&x, 1, 5, 9, 13)
		qr(&x, 2, 6, 10, 14)
		qr(&x, 3, 7, 11, 15)
		qr(&x, 0, 5, 10, 15)
		qr(&x, 1, 6, 11, 12)
		qr(&x, 2, 7, 8, 13)
		qr(&x, 3, 4, 9, 14)
	}
	o := off & (feedChunk - 64) // a whole block, inside out
	for i := 0; i < 16; i++ {
		v := x[i] + in[i]
		p := o + 4*i
		out[p], out[p+1], out[p+2], out[p+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	in[12]++
}

// qr is ChaCha20's quarter round on x[a], x[b], x[c], x[d].
//
//go:nosplit
func qr(x *[16]uint32, a, b, c, d int) {
	x[a] += x[b]
	x[d] = rotl(x[d]^x[a], 16)
	x[c] += x[d]
	x[b] = rotl(x[b]^x[c], 12)
	x[a] += x[b]
	x[d] = rotl(x[d]^x[a], 8)
	x[c] += x[d]
	x[b] = rotl(x[b]^x[c], 7)
}

//go:nosplit
func rotl(v uint32, n uint) uint32 { return v<<n | v>>(32-n) }

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// ProgramPID is the PID a deterministic block's program gets in its PID
// namespace (the init is 1; its Go runtime's threads take the PIDs in
// between, a varying number of them).
const ProgramPID = 32

// pinProgramPID makes the next PID of the namespace ProgramPID by forking
// children that exit at once until the last one got ProgramPID-1. It runs
// on the init's thread just before the program's fork, after the init
// has nothing left to do that could start a runtime thread (GOMAXPROCS=1,
// no blocking syscall through the scheduler in between; see runInit), so
// the PID allocator, sequential within the namespace, gives the program
// ProgramPID. Writing ns_last_pid or clone3's set_tid would need
// CAP_SYS_ADMIN, which the init no longer has here.
//
// The children are raw forks of this thread only; each child makes no
// call but exit (no allocation, no stack growth), like the runtime's own
// fork child.
func pinProgramPID() error {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
		if e != 0 {
			return wrap("deterministic mode: fork to pin the program's pid", e)
		}
		if r == 0 {
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
		}
		var ws syscall.WaitStatus
		for {
			_, _, e = syscall.RawSyscall6(syscall.SYS_WAIT4, r, uintptr(unsafe.Pointer(&ws)), 0, 0, 0, 0)
			if e != syscall.EINTR {
				break
			}
		}
		switch {
		case int(r) == ProgramPID-1:
			return nil
		case int(r) >= ProgramPID:
			return &herr{"deterministic mode: the init already used pid " + itoa(int64(r)) + ", past the program's " + itoa(ProgramPID), nil}
		}
	}
}

// quietPIDs starts the random feeder (startFeeder), lets the init's
// runtime start the threads it needs now (the feeder goroutine parks, the
// scheduler hands the P off once) and then pins the program's PID
// (pinProgramPID): the init's last steps before the program's fork.
func quietPIDs() error {
	if err := startFeeder(); err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		runtime.Gosched()
	}
	return pinProgramPID()
}
