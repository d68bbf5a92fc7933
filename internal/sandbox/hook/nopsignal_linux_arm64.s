//go:build linux

#include "textflag.h"

// nopSignalHandler is a signal handler that does nothing (see
// nopsignal_linux.go): the kernel calls it with the link register set to
// sigReturn (SA_RESTORER), and it returns there at once.
TEXT nopSignalHandler<>(SB),NOSPLIT|NOFRAME,$0-0
	RET

// sigReturn is the handler's restorer: rt_sigreturn(2) (139 on arm64).
TEXT sigReturn<>(SB),NOSPLIT|NOFRAME,$0-0
	MOVD	$139, R8
	SVC
	BRK // not reached

// func nopSignalAddrs() (handler, restorer uintptr)
TEXT ·nopSignalAddrs(SB),NOSPLIT,$0-16
	MOVD	$nopSignalHandler<>(SB), R0
	MOVD	R0, handler+0(FP)
	MOVD	$sigReturn<>(SB), R0
	MOVD	R0, restorer+8(FP)
	RET
