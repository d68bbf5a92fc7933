#include "textflag.h"

// func vforkExec(path, argv, envv, errp uintptr) (pid, errno uintptr)
//
// See vfork_linux_amd64.s: the child runs in registers only (R19–R22) and
// never returns.
TEXT ·vforkExec(SB),NOSPLIT,$0-48
	MOVD	path+0(FP), R19
	MOVD	argv+8(FP), R20
	MOVD	envv+16(FP), R21
	MOVD	errp+24(FP), R22
	MOVD	$0x4111, R0	// CLONE_VM|CLONE_VFORK|SIGCHLD
	MOVD	$0, R1
	MOVD	$0, R2
	MOVD	$0, R3
	MOVD	$0, R4
	MOVD	$220, R8	// SYS_clone
	SVC
	CMP	$0, R0
	BEQ	child
	CMN	$4095, R0
	BCC	ok
	MOVD	$0, pid+32(FP)
	NEG	R0, R0
	MOVD	R0, errno+40(FP)
	RET
ok:
	MOVD	R0, pid+32(FP)
	MOVD	$0, errno+40(FP)
	RET
child:
	MOVD	$0, R0
	MOVD	$0, R1
	MOVD	$154, R8	// SYS_setpgid
	SVC
	MOVD	R19, R0
	MOVD	R20, R1
	MOVD	R21, R2
	MOVD	$221, R8	// SYS_execve
	SVC
	NEG	R0, R0
	MOVD	R0, (R22)
exit:
	MOVD	$127, R0
	MOVD	$94, R8		// SYS_exit_group
	SVC
	B	exit

// func threadPointer() uintptr
//
// TPIDR_EL0: the C library's thread pointer in a cgo build (0 otherwise).
TEXT ·threadPointer(SB),NOSPLIT,$0-8
	MRS	TPIDR_EL0, R0
	MOVD	R0, ret+0(FP)
	RET

// nopSignalHandler is a signal handler that does nothing (catch): the
// kernel calls it with the link register set to sigReturn (SA_RESTORER),
// and it returns there at once.
TEXT ·nopSignalHandler(SB),NOSPLIT|NOFRAME,$0-0
	RET

// sigReturn is the handler's restorer: rt_sigreturn(2).
TEXT ·sigReturn(SB),NOSPLIT|NOFRAME,$0-0
	MOVD	$139, R8	// SYS_rt_sigreturn
	SVC
	BRK // not reached

// func nopSignalAddrs() (handler, restorer uintptr)
TEXT ·nopSignalAddrs(SB),NOSPLIT,$0-16
	MOVD	$·nopSignalHandler(SB), R0
	MOVD	R0, handler+0(FP)
	MOVD	$·sigReturn(SB), R0
	MOVD	R0, restorer+8(FP)
	RET
