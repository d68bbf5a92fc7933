// Package mount builds the minimal root filesystem of one sandboxed block
// inside its fresh mount namespace and pivots into it.
//
// The new root is a small tmpfs holding read-only binds of what
// interpreters need (/usr, /lib*, /bin, /sbin, a handful of /etc entries),
// generated identity files, device nodes bound from the host (/dev/null,
// zero, full, random, urandom — a user namespace cannot mknod), a private
// /proc of the block's PID namespace, a size-limited /tmp and the workdir.
// Everything else of the host — /root, /home, /etc/shadow, /var, other
// runs' workdirs, codellm's own files, /sys — simply does not exist inside.
//
// The lists below are the policy and are what the server sends the helper.
// The helper itself builds the root with package hook's raw-syscall copy of
// Setup (it must not import this package's dependencies, see
// internal/sandbox/PERF.md); Setup remains the readable reference and is
// tested on its own, and the sandbox's threat tests check the helper's
// root.
package mount

import "errors"

// ErrWorkdirTooLarge means the workdir did not fit in its private tmpfs.
var ErrWorkdirTooLarge = errors.New("workdir does not fit in the private tmpfs")

// Options describes the root to build.
type Options struct {
	// Dir is the absolute workdir path, the same inside and outside.
	Dir string
	// DirFD is a directory descriptor (O_RDONLY|O_DIRECTORY) of the host
	// workdir, opened before any mount could hide it (Dir may well live
	// under the host's /tmp, which the private /tmp covers).
	DirFD int
	// DirIsTree says DirFD is a detached mount (open_tree(OPEN_TREE_CLONE)
	// by a privileged server) to attach for Persist, instead of a plain
	// directory to bind.
	DirIsTree bool
	// Persist binds the workdir read-write; otherwise its files are copied
	// into a private tmpfs of TmpSize bytes so writes never reach the host.
	Persist bool
	// TmpSize bounds /tmp, /dev/shm and the non-persistent workdir.
	TmpSize int64
	// Passwd, Group and Hosts are written to /etc.
	Passwd, Group, Hosts []byte
	// Network: the operator enabled the network, so the resolver
	// configuration (/etc/resolv.conf, /etc/gai.conf) is bound too.
	Network bool
	// Staging is an existing host directory used as the mount point of the
	// new root before pivot_root (it is only covered inside this namespace).
	Staging string
}

// SystemDirs are bound read-only when they exist (symlinks, as on
// merged-/usr systems, are recreated as symlinks).
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// EtcEntries are bound read-only from the host /etc when they exist:
// the dynamic linker cache, TLS configuration and certificates, the
// alternatives symlink farm (/usr/bin/node and friends may point into it),
// timezone and resolver-independent name service configuration.
var EtcEntries = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates",
	"ca-certificates.conf", "pki", "alternatives", "localtime", "timezone",
	"nsswitch.conf", "host.conf", "mime.types", "protocols", "services",
}

// DevNodes are bound from the host /dev.
var DevNodes = []string{"null", "zero", "full", "random", "urandom"}
