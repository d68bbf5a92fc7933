// Package landlock detects the kernel's Landlock LSM for the sandbox: which
// ABI the running kernel offers ([ABI]) and the newest one codellm uses
// ([MaxABI]).
//
// Landlock is a second, independent wall behind the mount namespace: if a
// mount is ever misconfigured (a host path bound by mistake), Landlock still
// denies access to anything outside the listed hierarchies. The rules
// themselves — the handled-access masks reduced to the detected ABI and the
// (path, access) list of every block — are computed by package sandbox
// (landlockPlan in plan_linux.go) and applied by the helper, package hook,
// with the three raw landlock syscalls; the sandbox's differential threat
// tests (internal/sandbox/threat_linux_test.go) check them end to end.
package landlock

// MaxABI is the newest Landlock ABI codellm asks for. Newer kernels are
// used at this level; on older ones the handled rights are reduced to what
// the kernel knows (best effort), and package sandbox reports the level.
const MaxABI = 7
