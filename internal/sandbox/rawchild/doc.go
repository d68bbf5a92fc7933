// Package rawchild starts a child process that runs a list of system calls
// its parent prepared, without the Go runtime, and then stays the init of
// one program: it forks and execs the program, reaps everything orphaned
// into it, ends whatever the program left behind, reports the program's
// wait status and exits.
//
// Why: a sandbox helper today is a fresh exec of the 22 MB codellm binary,
// whose Go runtime start, threads, sysmon wake-ups and exit cost more CPU
// per block than the system calls that confine it (internal/sandbox/PERF.md,
// "session 9"). A forked child that never execs needs none of that: it is
// a copy of its parent (the spawner, whose heap is a few pages), it runs on
// the stack it was forked on, and it can only make raw system calls. So the
// parent compiles the whole setup into a [Prog] beforehand, every string
// and struct in memory the child inherits, and the child only interprets
// it. This is the design Go's own syscall.forkAndExecInChild uses, with a
// program instead of a fixed sequence.
//
// Status: the interpreter, the init, a private root of binds
// ([Prog.AddRoot]) and the lockdown (rlimits, no_new_privs, Landlock, the
// capability drop, seccomp: [Prog.AddLockdown]), with their tests. The
// sandbox does not use it yet: compiling a block's hook.Spec into a Prog
// (its root as package hook builds it, with the spawner's overlays, the
// host name, the workdir) and starting it from the spawner is the next step.
//
// The child reports on a status descriptor with fixed 12-byte records
// ([Record]): a failed step (its index and errno, so that the parent, which
// knows what each step was, can say precisely what failed), the program's
// PID once it is started, and its wait status once it has ended.
package rawchild
