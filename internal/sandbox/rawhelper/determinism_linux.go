//go:build linux && (amd64 || arm64)

package rawhelper

import (
	"fmt"
	"strconv"
	"syscall"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/rawchild"
	"golang.org/x/sys/unix"
)

// FeedFD is where a deterministic block's random FIFO waits for the init's
// feeder (rawchild.Feed), clear of the descriptors the steps open.
const FeedFD = 20

// randomFIFO is the FIFO's name while it is made and bound (then unlinked):
// in /dev/shm, a tmpfs of the block's root, so that it can be bound.
const randomFIFO = "/dev/shm/.codellm-random"

// timeNamespace appends the first part of package hook's deterministic
// mode, before the root is built: a time namespace for the program (it
// affects children and the next exec) whose monotonic and boot clocks read
// zero at the compile. Its offsets go through the host's /proc, opened
// while the helper is dumpable for that one step (a non-dumpable process's
// /proc files are root's; the write needs CAP_SYS_TIME in the namespace).
func timeNamespace(p *rawchild.Prog) error {
	p.Tag(hook.MHelper)
	p.Call("deterministic mode: unshare time namespace", syscall.SYS_UNSHARE, rawchild.Val(unix.CLONE_NEWTIME))
	var offsets []byte
	for _, c := range []int{unix.CLOCK_MONOTONIC, unix.CLOCK_BOOTTIME} {
		var ts unix.Timespec
		if err := unix.ClockGettime(int32(c), &ts); err != nil {
			return fmt.Errorf("rawhelper: deterministic mode: clock_gettime: %w", err)
		}
		sec, nsec := -ts.Sec, -ts.Nsec // offset = -now, with 0 <= nsec < 1e9
		if nsec < 0 {
			sec, nsec = sec-1, nsec+1e9
		}
		offsets = fmt.Appendf(offsets, "%d %d %d\n", c, sec, nsec)
	}
	fd := p.NewSlot()
	p.Call("deterministic mode: set dumpable", syscall.SYS_PRCTL, rawchild.Val(syscall.PR_SET_DUMPABLE), rawchild.Val(1))
	p.CallTo("deterministic mode: open /proc/self/timens_offsets", fd, syscall.SYS_OPENAT, rawchild.Int(unix.AT_FDCWD),
		rawchild.Val(p.Str("/proc/self/timens_offsets")), rawchild.Val(syscall.O_WRONLY|syscall.O_CLOEXEC), rawchild.Val(0))
	p.Call("set non-dumpable", syscall.SYS_PRCTL, rawchild.Val(syscall.PR_SET_DUMPABLE), rawchild.Val(0))
	p.Call("deterministic mode: write /proc/self/timens_offsets", syscall.SYS_WRITE, fd.Arg(), rawchild.Val(p.Buf(offsets)),
		rawchild.Val(uintptr(len(offsets))))
	p.Expect(uintptr(len(offsets)))
	p.Call("deterministic mode: close /proc/self/timens_offsets", syscall.SYS_CLOSE, fd.Arg())
	return nil
}

// seeded appends the rest of package hook's setupDeterminism, once the
// root is entered: /dev/urandom and /dev/random bound, read-only, to one
// FIFO the init's feeder fills with the keystream of sp.Determ (Feed; the
// FIFO 0444, so the program's uid may not write into the stream),
// getrandom(2) failing with ENOSYS (a filter stacked under the main one),
// ASLR off, umask 022.
func seeded(p *rawchild.Prog, sp *hook.Spec) (*rawchild.Feed, error) {
	if len(sp.Determ) != 32 {
		return nil, fmt.Errorf("rawhelper: deterministic mode: the seed key must be 32 bytes")
	}
	p.Tag(hook.MHelper)
	tmp := p.Str(randomFIFO)
	p.Call("deterministic mode: mkfifo "+randomFIFO, syscall.SYS_MKNODAT, rawchild.Int(unix.AT_FDCWD), rawchild.Val(tmp),
		rawchild.Val(syscall.S_IFIFO|0o600), rawchild.Val(0))
	fd := p.CallSave("deterministic mode: open "+randomFIFO, syscall.SYS_OPENAT, rawchild.Int(unix.AT_FDCWD), rawchild.Val(tmp),
		rawchild.Val(syscall.O_RDWR|syscall.O_CLOEXEC), rawchild.Val(0))
	p.Call("deterministic mode: place "+randomFIFO, syscall.SYS_DUP3, fd.Arg(), rawchild.Val(FeedFD), rawchild.Val(syscall.O_CLOEXEC))
	p.Call("deterministic mode: close "+randomFIFO, syscall.SYS_CLOSE, fd.Arg())
	p.Call("deterministic mode: chmod "+randomFIFO, syscall.SYS_FCHMOD, rawchild.Val(FeedFD), rawchild.Val(0o444))
	for _, dev := range []string{"/dev/urandom", "/dev/random"} {
		at := p.Str(dev)
		p.Call("deterministic mode: bind seeded stream on "+dev, syscall.SYS_MOUNT, rawchild.Val(tmp), rawchild.Val(at),
			rawchild.Val(0), rawchild.Val(syscall.MS_BIND), rawchild.Val(0))
		p.Call("deterministic mode: remount "+dev+" read-only", syscall.SYS_MOUNT, rawchild.Val(0), rawchild.Val(at), rawchild.Val(0),
			rawchild.Val(syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC),
			rawchild.Val(0))
	}
	p.Call("deterministic mode: unlink "+randomFIFO, syscall.SYS_UNLINKAT, rawchild.Int(unix.AT_FDCWD), rawchild.Val(tmp), rawchild.Val(0))
	p.AddLockdown(rawchild.Lockdown{Seccomp: hook.GetrandomENOSYS()})
	// The helper's personality is the spawner's, which it forked from.
	cur, _, _ := syscall.RawSyscall(syscall.SYS_PERSONALITY, 0xffffffff, 0, 0)
	const addrNoRandomize = 0x0040000
	p.Call("deterministic mode: personality(ADDR_NO_RANDOMIZE)", syscall.SYS_PERSONALITY,
		rawchild.Val((cur&0xffffffff)|addrNoRandomize))
	p.Call("deterministic mode: umask "+strconv.FormatInt(0o022, 8), syscall.SYS_UMASK, rawchild.Val(0o022))
	return &rawchild.Feed{FD: FeedFD, State: rawchild.ChaChaState([32]byte(sp.Determ))}, nil
}
