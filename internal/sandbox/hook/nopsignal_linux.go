//go:build linux && (amd64 || arm64)

package hook

import (
	"syscall"
	"unsafe"
)

// nopSignalAddrs returns the addresses of the handler and its restorer, which
// are file-local assembly symbols (nopSignalHandler<>, sigReturn<>): only the
// kernel calls them, never Go.
func nopSignalAddrs() (handler, restorer uintptr)

// kernelSigaction is struct sigaction as rt_sigaction(2) takes it on amd64
// and arm64.
type kernelSigaction struct {
	handler, flags, restorer uintptr
	mask                     uint64
}

// quietSignals gives each signal a handler that does nothing, installed
// with rt_sigaction(2) behind the Go runtime's back. An init needs its
// signals neither delivered to it (the runtime's default for these ends
// the process, and os/signal's subscription costs a thread and a round
// trip to it per signal, about a millisecond per block) nor ignored
// (SIG_IGN is inherited across exec, and a shell cannot trap a signal that
// was ignored when it started). A caught signal is reset to SIG_DFL by
// execve(2), so the program starts with none of this, and there is no
// moment between its fork and the init's last set-up step in which one of
// these signals could end the init. The handler runs on the receiving
// thread's alternate signal stack (the runtime gives every thread one)
// with every signal blocked, and returns at once.
func quietSignals(sigs []syscall.Signal) error {
	h, r := nopSignalAddrs()
	const saOnstack, saRestart, saRestorer = 0x08000000, 0x10000000, 0x04000000
	act := kernelSigaction{handler: h, flags: saOnstack | saRestart | saRestorer, restorer: r, mask: ^uint64(0)}
	for _, s := range sigs {
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(s), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
			return &herr{"rt_sigaction " + itoa(int64(s)), e}
		}
	}
	return nil
}
