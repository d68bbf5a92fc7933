// Package rawhelper compiles a block's hook.Spec into a rawchild program:
// the sandbox helper without the Go runtime. It runs in the spawner (which
// forks the helper and so must own the memory the child reads) and does,
// step for step, what package hook's helper does: the cgroup join, the
// namespaces the clone did not make (AtClone; Host.Unshare), a deterministic
// block's time namespace, the uid inside the user namespace, the private
// root (read-only overlays of the host directories, the spawner's bound
// where it made them, /etc, /dev, /proc, /tmp, the shared dir, the workdir
// attached or copied), the host name, a deterministic block's seeded
// /dev/urandom and the init's feeder and PID pin, the egress listener, and
// the lockdown (rlimits, no_new_privs, Landlock, the capability drop,
// seccomp), each step tagged with its mechanism so that a refusal names it.
//
// What it does not do, it refuses with a *FallbackError before anything
// starts, and the block gets the Go helper: the trial spawn, a block without
// its own user namespace, a workdir copy of more than 256 entries or half
// its tmpfs, host mounts that would split more than 1024 entries (see
// supported, workdir and mirrors).
package rawhelper
