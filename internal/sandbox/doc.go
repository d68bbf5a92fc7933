// Package sandbox runs one block of untrusted code confined: it is the only
// place in codellm that turns a resolved program, argv, environment and
// workdir into a running, isolated, resource-limited process and reports how
// that process ended.
//
// # Modes
//
//   - native (default): every block runs as PID 1 of fresh user, PID, mount,
//     network, IPC, UTS and cgroup namespaces, on a minimal pivot_root'ed
//     root, under Landlock, seccomp-bpf, rlimits and NO_NEW_PRIVS, as an
//     unprivileged mapped uid with no capabilities. If any of that cannot be
//     applied the block is refused with an *UnavailableError naming the
//     mechanism and how to fix it; native never downgrades silently.
//   - besteffort: the same, minus what the host lacks; each missing
//     mechanism is logged once and listed in Report.
//   - off: a plain exec in its own process group, confining nothing. Where
//     cgroups work, a limit-less run cgroup still lets Kill reach daemonised
//     descendants (atomic on v2, best effort on v1). Explicit and warned
//     about.
//
// # The re-exec helper
//
// Namespaces must be entered and the filesystem rebuilt by a process that
// is not the (multi-threaded) server. The helper is codellm's own binary,
// re-executed with a hidden argv marker (see [Main]). The per-block spec is
// sent on an inherited pipe (never argv or environment, which other
// processes can read through /proc); setup failures come back on a second,
// close-on-exec pipe that simply reads EOF once the user program has been
// exec'd, so an ambiguous exit status of the user's program is never
// mistaken for a sandbox error.
//
// The helper's body lives in package hook, which imports only runtime,
// syscall and unsafe. Go initialises packages in dependency order, lowest
// import path first among the ready ones, so hook's init runs right after
// package syscall's and takes over before the ~130 other initialisers of
// the codellm binary (prometheus, protobuf, go-seccomp-bpf's tables, the
// bridge, ...). Everything that needs a library is therefore computed by
// the server and sent in the spec: the seccomp program as raw sock_filter
// bytes (assembled once per process), the Landlock access masks for the
// kernel's ABI and the paths they apply to, the /etc/passwd, group and
// hosts text and the lists of what to bind. The spec is a flat binary
// record (hook.Spec.Encode/Decode), not JSON, for the same reason. The
// helper recognises itself by an environment marker (free to check) plus
// the argv marker; its own environment also sets GOGC=off and GOMAXPROCS=1
// and never reaches the program, whose environment comes from the spec.
//
// Because package sandbox imports hook, every binary that imports sandbox
// — cmd/codellm and every test binary — is a valid helper without further
// wiring. [Main] may be called first thing in main as well; it is
// idempotent, documents the intent and catches a helper whose environment
// marker was lost. PERF.md has the measurements behind this design.
//
// # The raw helper
//
// Most blocks do not get the re-exec helper but the raw one: a spawner
// (below) compiles the block's spec into a list of system calls (package
// rawhelper) and forks a child that runs them without the Go runtime
// (package rawchild) and then stays the block's init, as the Go helper
// does. Its Started, wait and failure records are read by the same code;
// a failure names its mechanism and step. The Go runtime's start, threads
// and exit were most of a helper's CPU (PERF.md, "session 9"). It serves
// every block with its own user namespace (rawCandidate) but the trial
// spawn, a collect of an unprivileged codellm (the held root is read
// through /proc/<init>/root, which a fork of the spawner opens only to
// CAP_SYS_PTRACE in the spawner's user namespace) and what rawhelper
// refuses (a large workdir copy, a split of more than 1024 entries): those
// get the Go helper, as every block does with [Config.GoHelper]. Its root
// binds the spawner's overlays where the spawner made them (root) and
// mounts its own otherwise (an unprivileged codellm, a directory with host
// mounts below it, split entry by entry from the server's mount table,
// read again once when the kernel refuses an overlay that table did not
// foresee). The spawner clones it with its user and PID namespaces only;
// it unshares the mount, network, IPC and UTS namespaces itself, off the
// spawner's loop. `make test` runs this package's tests once on each
// helper.
//
// # The spawners
//
// A helper's clone makes a user namespace, so Go's syscall package forks
// for it instead of vforking: the server's page tables are copied and its
// whole heap is write-protected, and the server then pays a copy-on-write
// fault plus a TLB-shootdown IPI for each heap page it writes next. Each
// Sandbox therefore clones its helpers through spawners (package spawner):
// re-executed codellms whose heap is about a megabyte. A spawner answers one
// block at a time (its loop is a serial section of every block's start), so
// a block takes a free one, starts one more while fewer than one per four
// CPUs run (maxSpawners), or waits; [Sandbox.SerialStats] counts the time
// they were held and busy and the waits. They clone with CLONE_PARENT, so
// helpers remain the server's children (waited for, signalled and
// parent-death-signalled as before), and can exec only the sealed helper
// binary. A clone they cannot take (no new user namespace), spawners that
// cannot start or died three times, and every clone after [Sandbox.Close]
// go straight from a locked server thread. On cgroup v2 a spawner clones a
// Go helper outside its block's cgroup (clone3 refuses CLONE_PARENT with
// the exit signal Go's clone3 always sets) and the server moves it in while
// it waits for its spec, as on v1; the raw helper's own clone3 leaves the
// signal out and is born inside. The spawners end with Close; `ps` shows
// them as codellm-spawner.
//
// # Start paths
//
// A block starts on one of these, each confining it alike (the
// threat-model tests run on each), each kept for the hosts where it pays:
//
//   - The raw helper, cloned by a spawner when the block asks: every host
//     with user namespaces on amd64 and arm64, root or not. On cgroup v2
//     clone3 places it in the block's group at birth (CLONE_INTO_CGROUP);
//     on v1 it joins by its tasks file as its first step. This is the path
//     on v2 hosts and the one whose throughput grows with cores (the clone
//     in the spawner's loop makes two namespaces; the helper makes the rest
//     in parallel).
//   - The raw helper forked ahead: after each reply a spawner forks the
//     next block's helper, which writes nothing of the block's and makes
//     its namespaces while it waits. Only where the block's cgroup is not
//     needed at the clone: cgroup v1 and cgroup-less hosts (on v2 the group
//     is not known ahead). It takes the clone and the namespaces off a c=1
//     block's path: p50 0.88-0.93x at c=1 on the 2-core v1 VM (PERF.md,
//     "session 12").
//   - The Go helper (codellm re-exec'd, package hook), cloned by a spawner:
//     the blocks the raw helper does not serve (above), every block with
//     [Config.GoHelper], and architectures other than amd64 and arm64.
//   - The Go helper cloned from a locked server thread: blocks without a
//     user namespace of their own (a besteffort host without them), and
//     every block when no spawner runs.
//
// Pre-started Go helpers (the first block's helper of each pooled run group
// started ahead, with --go-helper only) were removed in issue 37.
//
// # Probed kernel facilities
//
// close_range, clone3, CLONE_INTO_CGROUP, pidfds, time namespaces and the
// Landlock ABI are probed when a Sandbox starts (features_linux.go) and
// listed in its Report: the raw helper needs close_range and, on cgroup v2,
// clone3, and without them blocks get the Go helper; without clone3 a
// helper is moved into its cgroup before it runs anything instead of being
// born in it. A helper clone that fails is blamed on the part that really
// refuses it (startcause_linux.go), never on the user namespace by default.
//
// # PID 1 semantics
//
// In native mode the helper stays as PID 1 (init) of the block's PID
// namespace, fully confined itself, and starts the program as its child
// (hook's runInit): the program is never PID 1, so it has a shell's signal
// semantics — its own kill -9 $$ or kill -TERM $$ ends it, os.abort() is a
// SIGABRT, a writer at the head of a pipeline dies of SIGPIPE (the
// pipeline treats that as excused). The init ignores every signal it can
// (as a PID 1 without handlers would: a process of the block that signals
// PID 1 achieves nothing), reaps every orphan, and when the program ends it
// exits at once, after which the kernel kills everything else in the
// namespace, so nothing outlives the block (setsid and double-forked
// daemons included).
//
// How the program ended reaches codellm on the status pipe, not in the
// init's exit status (an init cannot die of a signal it raises itself):
// after Started the init writes one record, 'W' and the program's raw wait
// status (hook.WaitRecord), then exits with the program's exit code, or
// 128+signal. codellm reads that record when it reaps the init; no record
// means the init itself was killed (codellm's SIGKILL, which ended the
// whole namespace), and the init's status is the block's.
//
// [Process.Terminate] sends SIGTERM to the program itself, which codellm
// finds among the init's children by the namespace PID the init reports
// with Started (program_linux.go), through a pidfd; the init used to
// forward it, which took a subscription to the Go runtime's signal
// thread in every block (about a millisecond of CPU and of latency). The
// pipeline and the runner use it on a timeout and send SIGKILL
// [TermGrace] later. The init costs a fork and about a millisecond of
// CPU per block (BENCHMARKS.md); Config.ProgramAsPID1 restores the old
// behaviour for benchmarks and differential tests only. Without a PID
// namespace (besteffort) the program is exec'd directly and is not PID 1
// anyway.
//
// # Limits and defaults
//
// Per server (Config.Limits), overridable per run (NewRun):
//
//	memory      512 MiB  whole run, RAM+swap (cgroup memory / memory.memsw)
//	pids        256      whole run, processes+threads (cgroup pids)
//	cpu time    none     RLIMIT_CPU per process (soft = hard, SIGKILL)
//	tmp size    64 MiB   each tmpfs: /tmp, /dev/shm, non-persistent workdir
//	file size   64 MiB   RLIMIT_FSIZE
//	open files  1024     RLIMIT_NOFILE
//	network     off      empty network namespace + Landlock TCP deny
//
// Core dumps are always off (RLIMIT_CORE 0). Tmpfs pages are charged to
// the run's memory cgroup too, so disk use inside the sandbox is bounded
// twice.
//
// # Identity
//
// Code runs as uid/gid 1000 ("sandbox") inside a user namespace in which
// that is the only mapped id: it maps to Config.HostUID (default 65534)
// when codellm runs as root, and to codellm's own uid otherwise. When
// running as root the workdir is chowned to that host uid before each block
// (descriptor-relative walk, no symlink is followed) so the block can use
// it.
package sandbox
