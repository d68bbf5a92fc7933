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
//   - off: a plain exec in its own process group. Explicit and warned about.
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
// This package's init function runs the helper when the marker is present,
// so every binary that imports the package — cmd/codellm and every test
// binary — is a valid helper without further wiring. [Main] may be called
// first thing in main as well; it is idempotent and documents the intent.
//
// # PID 1 semantics
//
// In native mode the user program itself is PID 1 of its namespace (no Go
// init process is kept around, which saves a process and a few hundred
// microseconds per block). The kernel kills every other process of the
// namespace when PID 1 exits, which is what makes "nothing outlives the
// block" hold even for daemonised children. The consequence: signals whose
// default action is to terminate (SIGPIPE, SIGTERM, SIGINT, SIGXFSZ, ...)
// are ignored when sent from inside the namespace to PID 1 unless the
// program installs a handler. A writer at the head of a pipeline therefore
// usually sees EPIPE instead of dying of SIGPIPE (e.g. `yes` exits 1 with
// "Broken pipe"); the pipeline treats a non-zero exit after its downstream
// finished as excused. SIGKILL from codellm (outside the namespace) always
// works.
package sandbox
