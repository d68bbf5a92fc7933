// Package rawhelper compiles a block's hook.Spec into a rawchild program:
// the sandbox helper without the Go runtime. It runs in the spawner (which
// forks the helper and so must own the memory the child reads) and does,
// step for step, what package hook's helper does for the common block: the
// cgroup join and namespace, the uid inside the user namespace, the private
// root (the spawner's overlays bound, /etc, /dev, /proc, /tmp, the shared
// dir, the workdir attached or copied), the host name, and the lockdown
// (rlimits, no_new_privs, Landlock, the capability drop, seccomp), each
// step tagged with its mechanism so that a refusal names it.
//
// What it does not do, it refuses with a *FallbackError before anything
// starts, and the block gets the Go helper: the trial spawn, egress,
// deterministic blocks, holding inits, directories the spawner did not
// overlay, large workdir copies (see supported and workdir).
package rawhelper
