//go:build linux

package hook

import (
	"runtime"
	"syscall"
	"unsafe"
)

// RandomBytes is the length of the seeded stream that replaces /dev/urandom
// and /dev/random in a deterministic block. Each open reads it from the
// start; a read past its end returns EOF (a short read).
const RandomBytes = 256 << 10

// setupDeterminism makes the block reproducible (see package sandbox's
// Determinism for what each step covers). Step 1 runs before the root is
// built (newTimeNamespace), the rest after it (/dev/shm exists); all while
// the helper still holds CAP_SYS_ADMIN and CAP_SYS_TIME in its user
// namespace:
//
//  1. a time namespace for the program (CLONE_NEWTIME affects children and
//     the next exec only) whose monotonic and boot clocks start at zero;
//  2. /dev/urandom and /dev/random bound, read-only, to a file holding the
//     ChaCha20 keystream of sp.Determ (written to /dev/shm, then unlinked);
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
	if err := installSeccomp(getrandomENOSYS(), sp.Init); err != nil {
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

// seededRandom binds a read-only file of the key's keystream over
// /dev/urandom and /dev/random. The file is made in /dev/shm (a tmpfs of
// this mount namespace, so it can be bound) and unlinked at once: the
// binds keep it alive, and no name of it is left for the program.
func seededRandom(key []byte) error {
	const tmp = "/dev/shm/.codellm-random"
	stream := make([]byte, RandomBytes)
	ChaCha20(key, stream)
	if err := writeFile(tmp, stream, 0o444); err != nil {
		return wrap("deterministic mode: write "+tmp, err)
	}
	defer syscall.Unlink(tmp)
	for _, dev := range [...]string{"/dev/urandom", "/dev/random"} {
		if err := syscall.Mount(tmp, dev, "", syscall.MS_BIND, ""); err != nil {
			return wrap("deterministic mode: bind seeded stream on "+dev, err)
		}
		if err := syscall.Mount("", dev, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
			return wrap("deterministic mode: remount "+dev+" read-only", err)
		}
	}
	return nil
}

// getrandomENOSYS is a classic-BPF filter: getrandom → ENOSYS, all else
// allowed (the main filter, stacked with it, still decides the rest; the
// stricter action wins, and non-native ABIs are killed there).
func getrandomENOSYS() []byte {
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
// an all-zero nonce, block counter from 0. It is the only cipher the helper
// needs, written out so that this package imports no crypto (see the
// package comment on start-up cost).
func ChaCha20(key []byte, out []byte) {
	var st [16]uint32
	st[0], st[1], st[2], st[3] = 0x61707865, 0x3320646e, 0x79622d32, 0x6b206574
	for i := 0; i < 8; i++ {
		st[4+i] = le32(key[4*i:])
	}
	var blk [64]byte
	for off := 0; off < len(out); off += 64 {
		chachaBlock(&st, &blk)
		copy(out[off:], blk[:])
		st[12]++
	}
}

func chachaBlock(in *[16]uint32, out *[64]byte) {
	x := *in
	qr := func(a, b, c, d int) {
		x[a] += x[b]
		x[d] = rotl(x[d]^x[a], 16)
		x[c] += x[d]
		x[b] = rotl(x[b]^x[c], 12)
		x[a] += x[b]
		x[d] = rotl(x[d]^x[a], 8)
		x[c] += x[d]
		x[b] = rotl(x[b]^x[c], 7)
	}
	for i := 0; i < 10; i++ {
		qr(0, 4, 8, 12)
		qr(1, 5, 9, 13)
		qr(2, 6, 10, 14)
		qr(3, 7, 11, 15)
		qr(0, 5, 10, 15)
		qr(1, 6, 11, 12)
		qr(2, 7, 8, 13)
		qr(3, 4, 9, 14)
	}
	for i := range x {
		v := x[i] + in[i]
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
}

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

// quietPIDs lets the init's runtime start the threads it needs now (the
// relay goroutine parks, the scheduler hands the P off once) and then pins
// the program's PID (pinProgramPID).
func quietPIDs() error {
	for i := 0; i < 3; i++ {
		runtime.Gosched()
	}
	return pinProgramPID()
}
