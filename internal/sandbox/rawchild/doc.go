// Package rawchild starts a child process that runs a list of system calls
// its parent prepared, without the Go runtime, and then stays the init of
// one program: it forks and execs the program, reaps everything orphaned
// into it, ends whatever the program left behind, reports the program's
// wait status and exits (or holds its namespace for whoever reads what the
// program left, [Program.Hold]; or becomes the program, [Program.Direct]).
// For a deterministic block it also feeds a FIFO with a ChaCha20 keystream
// from a fork of its own and pins the program's PID ([Program.Feed]).
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
// It is the mechanism under the sandbox's raw helper: package rawhelper
// compiles a block's spec into a Prog (a private root of binds, overlays
// and a workdir, [Prog.AddRoot]; the lockdown, [Prog.AddLockdown]) and the
// spawner starts it. The fork leaves out what the child does not need (the
// parent marks it MADV_DONTFORK around the clone, drop_linux.go): it gets
// its frame, its stack, its thread's TLS and the Prog's memory, lets go of
// whatever else it still shares before its steps, and of the Prog's memory
// too once the program runs ([Attr.KeepShared] keeps all of it), so the
// parent's later writes are not copy-on-write faults. [Prefork] forks a
// child before its program exists (it makes the namespaces of
// [Attr.IdleUnshare] while it waits); [Idle.Run] hands it the program,
// compiled later into the same memory. Code that runs in the child stores
// no pointer (the write barrier's flag is on a page it does not have).
//
// The child reports on its status descriptor with records ([Record]): the
// program's PID once it is started and its wait status once it has ended
// (byte for byte package hook's records, so one reader serves both
// helpers), or the first failed step: its index, errno, tag ([Prog.Tag])
// and what it did, so that the reader can say precisely what failed
// without the Prog.
package rawchild
