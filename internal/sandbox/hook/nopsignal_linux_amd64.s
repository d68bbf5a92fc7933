//go:build linux

#include "textflag.h"

// nopSignalHandler is a signal handler that does nothing (see
// nopsignal_linux.go). The kernel calls it with the C ABI on the thread's
// alternate signal stack; it touches no register the kernel does not
// restore, and returns to sigReturn, whose address the kernel pushed.
TEXT nopSignalHandler<>(SB),NOSPLIT|NOFRAME,$0-0
	RET

// sigReturn is the handler's restorer: rt_sigreturn(2) (15 on amd64).
TEXT sigReturn<>(SB),NOSPLIT|NOFRAME,$0-0
	MOVQ	$15, AX
	SYSCALL
	INT	$3 // not reached

// func nopSignalAddrs() (handler, restorer uintptr)
TEXT ·nopSignalAddrs(SB),NOSPLIT,$0-16
	LEAQ	nopSignalHandler<>(SB), AX
	MOVQ	AX, handler+0(FP)
	LEAQ	sigReturn<>(SB), AX
	MOVQ	AX, restorer+8(FP)
	RET
