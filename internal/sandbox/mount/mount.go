// Package mount lists what the minimal root filesystem of a sandboxed
// block contains: the host system directories, /etc entries and device
// nodes that are mounted into it read-only. Directories come as read-only
// overlays with only lower layers (the overlay mechanism; plain recursive
// binds without it), so a host Unix socket below them refuses connect();
// files are read-only binds.
//
// These lists are the policy. Package sandbox sends them to the helper in
// the spec (and bases the Landlock read rules on SystemDirs); the helper,
// package hook, builds the root from them with raw syscalls inside the
// block's mount namespace and pivots into it. Besides these binds the root
// holds generated /etc/passwd, group, hosts and hostname files, /dev/fd
// and the stdio links, a private /proc of the block's PID namespace,
// size-limited /tmp and /dev/shm tmpfs and the workdir (bound read-write
// when persistent, otherwise copied into a private tmpfs). Everything else
// of the host — /root, /home, /etc/shadow, /var, other runs' workdirs,
// codellm's own files, /sys — simply does not exist inside. The sandbox's
// threat tests (internal/sandbox/threat_linux_test.go) check the root the
// helper actually builds.
//
// The package has no code and no dependencies on purpose: the benchmark
// harness (bench/) reads the same lists.
package mount

// SystemDirs are bound read-only when they exist (symlinks, as on
// merged-/usr systems, are recreated as symlinks).
var SystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// EtcEntries are bound read-only from the host /etc when they exist:
// the dynamic linker cache, TLS configuration and certificates, the
// alternatives symlink farm (/usr/bin/node and friends may point into it),
// timezone, resolver-independent name service configuration and the configuration of language
// runtimes (JDK, R) that their installed files link into /etc. When the
// operator enables the network, /etc/resolv.conf and /etc/gai.conf are
// bound too.
var EtcEntries = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates",
	"ca-certificates.conf", "pki", "alternatives", "localtime", "timezone",
	"nsswitch.conf", "host.conf", "mime.types", "protocols", "services",
	// Language runtimes whose installed files point into /etc: the JDK's security and logging
	// configuration (Debian's conf/ symlinks), R's Renviron and ldpaths, Debian's matplotlibrc and fontconfig.
	"java-17-openjdk", "java-21-openjdk", "R", "matplotlibrc", "fonts",
}

// DevNodes are bound from the host /dev (a user namespace cannot mknod).
var DevNodes = []string{"null", "zero", "full", "random", "urandom"}
