// Package runner is codellm's Piston-compatible runner: it executes one program per request in the
// sandbox and keeps stateful session workspaces, for agent platforms (LibreChat's Code Interpreter) and
// for the bridge worker's runtime supervisors (bridge-protocol.md §11.5). It serves
// POST /api/v2/execute, GET /api/v2/runtimes, GET /api/v2/health and DELETE /api/v2/sessions/{id} on the
// main listener (the server mounts Register behind its authentication), and offers the same semantics
// in-process through Execute and ResetSession (the worker's "embedded" supervisor).
//
// # Execute
//
// The language is Piston's name or alias ("javascript", "node-js", "py3"; see piston.go), or a canonical
// interpreter name or one of its code block labels (case-insensitive); version is a node-semver selector
// ("*", "3", ">=3", "^3", "~3.11", "3 || 2"; see semver.go) matched against the installed version, which
// is probed once at New with `cmd --version`. The first file is the entry point: the argv is the interpreter's cmd, the
// absolute path of that file, then args. The other files are written beside it (names are relative,
// clean, slash-separated paths; sub-directories are created; tmp/ is reserved). An unnamed file i is
// called file<i><ext>. stdin is fed from a file (empty = /dev/null). The environment is exactly the
// child environment of openai-contract.md §7 (HOME = workspace, TMPDIR = workspace/tmp) plus env_vars;
// env_vars may not set the reserved names, a name an interpreter entry sets, or an exposed name (400).
// Each arg and each NAME=value is at most 131071 bytes (the kernel's MAX_ARG_STRLEN), args at most 512 KiB
// and env_vars at most 1 MiB in total, so that execve never fails with E2BIG (400 names the limit instead).
//
// Limits: run_timeout and run_cpu_time are milliseconds, run_memory_limit bytes (−1 = the maximum).
// Absent means the server's maximum; zero or negative is 400; a time above the maximum is clamped to it
// (LibreChat's runner; the hub derives run_timeout from its own deadline), a memory limit above it is 400.
// run_cpu_time is rounded up to whole seconds (RLIMIT_CPU).
// The compile_* fields are validated the same way and otherwise unused: no registered interpreter
// compiles, so "compile" is never present in a reply.
//
// Reply: run.stdout and run.stderr are captured separately, each capped at MaxOutputBytes; a stream
// passing the cap kills the run (status "OL" or "EL"), keeping the first MaxOutputBytes. run.output is
// both streams in the order codellm read them from their two pipes: chunks separated by any scheduling
// point come out in order, writes racing within microseconds may not (one pipe for both would lose the
// separation Piston also reports). code is the exit status, or null when a signal ended the program and
// signal is then its name ("SIGKILL"); signal is null otherwise. status/message follow Piston: null on a
// clean exit, "RE" non-zero exit, "SG" signal (a sandbox limit is named), "TO" timeout (signal SIGKILL),
// "OL"/"EL" output caps. wall_time and cpu_time are milliseconds, memory is peak bytes.
//
// Files out: after the run, regular files of the workspace (outside tmp/, symlinks never followed) that
// are new or whose identity (inode, size, mtime) changed since the request's files were written
// are listed in "files", sorted by name: at most FilesOutMaxCount, each with base64 content when at most
// FilesOutMaxBytes (otherwise content_omitted). files_truncated says some were left out. In the private
// workspace mode (below) "changed" is a different size, permissions or content than the host copy's, and
// a run stopped at run_timeout or an output cap still returns its files.
//
// # Sessions
//
// The X-Runtime-Session-Id header (printable ASCII, ≤ 256 bytes) binds a persistent workspace; without
// it each execute gets a fresh directory removed afterwards. Files persist across executes of a session;
// processes never do: every process of an execute is dead before it returns. Executes of one session are
// serialised. Sessions are isolated from each other and from session-less runs: each workspace is its own
// directory under a root only the runner can list, and the sandbox makes nothing but the run's own
// workspace visible. A session idle for SessionTTL is deleted (its workspace with it); a later execute
// with the same ID starts from an empty workspace. At most MaxSessions exist; creating one more is 429
// {"error":"too_many_sessions"}. DELETE /api/v2/sessions/{id} (ResetSession) kills its in-flight execute
// and removes it; it answers 204 whether or not the session existed.
//
// A session is dirty — its state unknown — after an execute in which codellm killed the program because
// the caller went away (its reply is lost), the sandbox ended it for a limit (memory, pids,
// CPU, file size), the sandbox failed after the start, or codellm's own workspace I/O failed (writing the
// request's files, scanning for files out); and when its directory is found missing or replaced. Each of
// these can leave half-written files the client did not ask for. A program that exits on its own, with
// any code or a signal it raised itself, or that codellm stopped at run_timeout or an output cap (the
// reply says so, as it says a crash), leaves a clean session. The execute that makes a session dirty
// still gets its normal reply; every later execute of that session gets 409
// {"error":"session_workspace_dirty"} until the session is deleted.
//
// # Errors
//
// {"message"} with 400 (bad request; an unknown language or version, as Piston), 413 (body over MaxBodyBytes),
// 415 (Content-Type not application/json), 429 (no slot within the queue timeout, or too many sessions;
// Retry-After: 5); {"error","message"} with 409 session_workspace_dirty and 500 sandbox_execution_failed;
// 503 while shutting down. In-process callers get *Error, which matches one sentinel (ErrBadRequest, …).
//
// # Lifetime
//
// New creates a private directory <WorkRoot>/codellm-runner-* (mode 0711: the sandbox user may traverse
// it, nobody may list it) and holds an flock on its .lock for the life of the runner. Close kills what is
// running and removes the directory. A runner that dies without Close leaves its directory, with users'
// files, behind; the next New on the same WorkRoot removes every such directory whose lock is free, after
// unmounting any workspace tmpfs inside it.
//
// # Known limits
//
// With WorkspaceSize as root every workspace is its own size- and inode-limited tmpfs, bind-mounted
// read-write into the sandbox (Persist). Otherwise (not root, or the mount refused) the host directory is
// never bound: each stage runs in the sandbox's private tmpfs of WorkspaceSize, copied in from it, and is
// collected once the program is over (private.go: files out through an os.Root, sessions and compile
// stages copied back whole into a fresh directory swapped in, what the run made unreadable made readable
// to its owner first, a tree that cannot be copied refused with the host copy unchanged); every session execute then costs a copy of the session in and out. Without
// WorkspaceSize, or without a sandbox private root, a run's disk use is bounded per file by the sandbox's
// file size limit but not in total. In sandbox mode off nothing isolates sessions from each other beyond their directory names.
package runner
