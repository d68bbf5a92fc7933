#include "textflag.h"

// func vforkExec(path, argv, envv, errp uintptr) (pid, errno uintptr)
//
// clone(CLONE_VM|CLONE_VFORK|SIGCHLD) and, in the child, setpgid(0, 0)
// and execve(path, argv, envv); a failed execve stores its errno at errp
// and exits 127. The child shares the caller's memory and stack until its
// exec, so it must not return, call or push anything: it runs in registers
// only (RBX, R12, R13 and R9 survive SYSCALL), and the caller resumes on an
// untouched stack.
TEXT ·vforkExec(SB),NOSPLIT,$0-48
	MOVQ	path+0(FP), R12
	MOVQ	argv+8(FP), R13
	MOVQ	envv+16(FP), BX
	MOVQ	errp+24(FP), R9
	MOVQ	$0x4111, DI	// CLONE_VM|CLONE_VFORK|SIGCHLD
	XORQ	SI, SI
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$56, AX		// SYS_clone
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$0, pid+32(FP)
	NEGQ	AX
	MOVQ	AX, errno+40(FP)
	RET
ok:
	MOVQ	AX, pid+32(FP)
	MOVQ	$0, errno+40(FP)
	RET
child:
	XORQ	DI, DI
	XORQ	SI, SI
	MOVQ	$109, AX	// SYS_setpgid
	SYSCALL
	MOVQ	R12, DI
	MOVQ	R13, SI
	MOVQ	BX, DX
	MOVQ	$59, AX		// SYS_execve
	SYSCALL
	NEGQ	AX
	MOVQ	AX, 0(R9)
exit:
	MOVQ	$127, DI
	MOVQ	$231, AX	// SYS_exit_group
	SYSCALL
	JMP	exit

// nopSignalHandler is a signal handler that does nothing (catch): the
// kernel calls it with the C ABI and returns to sigReturn, whose address it
// pushed (SA_RESTORER).
TEXT ·nopSignalHandler(SB),NOSPLIT|NOFRAME,$0-0
	RET

// sigReturn is the handler's restorer: rt_sigreturn(2).
TEXT ·sigReturn(SB),NOSPLIT|NOFRAME,$0-0
	MOVQ	$15, AX		// SYS_rt_sigreturn
	SYSCALL
	INT	$3 // not reached

// func nopSignalAddrs() (handler, restorer uintptr)
TEXT ·nopSignalAddrs(SB),NOSPLIT,$0-16
	LEAQ	·nopSignalHandler(SB), AX
	MOVQ	AX, handler+0(FP)
	LEAQ	·sigReturn(SB), AX
	MOVQ	AX, restorer+8(FP)
	RET
