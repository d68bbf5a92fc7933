// Package landlock confines the sandbox helper (and the program it execs)
// with the Landlock LSM: which files may be read, written or executed,
// whether TCP bind/connect is allowed, and — where the ABI has it — IPC
// scoping of abstract Unix sockets and signals to the sandbox's own domain.
//
// Landlock is a second, independent wall behind the mount namespace: if a
// mount is ever misconfigured (a host path bound by mistake), Landlock still
// denies access to anything outside the listed hierarchies.
package landlock

import "errors"

// ErrUnsupported is returned when the kernel has no Landlock.
var ErrUnsupported = errors.New("landlock is not supported by this kernel")

// Policy lists what the confined program may touch. Paths are resolved when
// Restrict is called, so it must run after pivot_root.
type Policy struct {
	ReadExec  []string // hierarchies readable and executable (system dirs)
	ReadOnly  []string // hierarchies readable, not executable (/proc)
	ReadWrite []string // hierarchies fully writable (workdir, /tmp)
	RWFiles   []string // single files readable and writable (/dev/null, ...)
	ListRoot  bool     // allow listing "/" itself
	DenyTCP   bool     // handle TCP bind/connect with no allowed port
	Scope     bool     // restrict abstract Unix sockets and signals to the domain
}
