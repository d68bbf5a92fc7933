// Package hook is the sandbox helper's process body: it turns a freshly
// re-executed codellm (in new namespaces) into one confined block and
// starts the user's program — as the child of the helper, which stays as
// the PID namespace's init (runInit), or, without a PID namespace, by
// exec'ing it.
//
// It exists separately from package sandbox for one reason: start-up cost.
// Go initialises packages in dependency order, choosing the lowest import
// path among the ready ones; this package imports only runtime, syscall,
// unsafe and os/signal (for the init, see runInit; os and its few
// dependencies cost about 0.2 ms), so its init runs right after theirs —
// before the ~130 other package initialisers of the codellm binary (prometheus,
// protobuf, go-seccomp-bpf's syscall tables, the bridge, ...), none of which
// the helper needs. Everything that needs a library (the BPF program, the
// Landlock access masks, /etc/passwd text, the mount lists) is computed by
// the server and arrives in [Spec]; the helper only performs syscalls.
//
// Package sandbox owns the policy; this package owns the wire format (spec
// in, status out) so both sides share one definition.
package hook
