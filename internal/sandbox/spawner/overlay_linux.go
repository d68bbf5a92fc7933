//go:build linux

package spawner

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Why the spawner overlays directories: a block's private root shows the
// host's system directories, /etc and the shared dir as read-only overlays
// with only lower layers, so that a host Unix socket below them refuses
// connect() (see package hook). Each helper used to mount those overlays
// itself, three fresh overlay superblocks per block: their mount, a cold
// dentry cache that every path lookup of the program fills again (python
// looks up hundreds of files at start), and at the block's end one RCU
// grace period per overlay before its last process is gone. The overlays
// show the same read-only files to every block, so a spawner running as
// root makes them once, in place, in a mount namespace of its own, and
// every helper it clones binds them from its copy of that namespace
// (hook.Spec.Overlaid). Nothing about a block is reused: its root, workdir
// and namespaces are still its own; only the read-only view of the host
// files, which binds shared before, is now one superblock for all.
//
// A lower layer changed while an overlay is mounted may show stale entries
// (overlayfs caches lookups of its layers), so the sandbox replaces its
// spawner, and with it the overlays, after a while (sandbox.overlayMaxAge).

// OverlayDir is a host directory to overlay in place.
type OverlayDir struct {
	Path string `json:"path"`
	// Hidden names the lower layer by a descriptor in the overlay's
	// options, so that a block that sees the directory at another path
	// (the shared dir at /codellm) does not learn its host path from
	// /proc/self/mountinfo.
	Hidden bool `json:"hidden,omitempty"`
}

// Hello is the spawner's first message: the directories it overlaid, or
// why it overlaid none or not all of them.
type Hello struct {
	Overlaid []string `json:"overlaid,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// emptyMounts are where the overlays' empty second layer may be mounted
// for the time it takes to mount them (the first existing directory not
// above or below any overlaid one): the mount is detached again before any
// helper is cloned, so what it covers is back in place.
var emptyMounts = []string{"/tmp", "/dev/shm", "/mnt", "/dev"}

// overlayInPlace makes this thread's mount namespace its own (a slave of
// the server's, so mounts made there later still arrive), then mounts each
// of dirs over itself as a read-only, nosuid, nodev overlay of itself and
// an empty directory. It runs on the spawner's main thread, which every
// clone comes from; the Go runtime's other threads keep the server's
// namespace and never look up a path.
func overlayInPlace(dirs []OverlayDir) Hello {
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return Hello{Error: "unshare the mount namespace: " + err.Error()}
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_SLAVE, ""); err != nil {
		return Hello{Error: "make the mount namespace a slave: " + err.Error()}
	}
	at := emptyMountFor(dirs)
	if at == "" {
		return Hello{Error: "no directory to mount the empty layer on"}
	}
	// Lower layers named by descriptor are opened before the empty
	// layer's tmpfs may cover their path.
	fds := make([]int, len(dirs))
	for i, d := range dirs {
		fds[i] = -1
		if d.Hidden {
			fds[i], _ = syscall.Open(d.Path, unix.O_PATH|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		}
	}
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
	}()
	if err := syscall.Mount("tmpfs", at, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "size=4k,nr_inodes=8,mode=0755"); err != nil {
		return Hello{Error: "mount the empty layer on " + at + ": " + err.Error()}
	}
	defer func() {
		_ = syscall.Chdir("/")
		_ = syscall.Unmount(at, syscall.MNT_DETACH)
	}()
	// Relative to the working directory the empty layer shows as "proc"
	// in the options, as in a helper's own overlays.
	if err := syscall.Chdir(at); err != nil {
		return Hello{Error: "chdir " + at + ": " + err.Error()}
	}
	if err := syscall.Mkdir("proc", 0o555); err != nil {
		return Hello{Error: "make the empty layer: " + err.Error()}
	}
	var h Hello
	var failed []string
	for i, d := range dirs {
		lower := d.Path
		if d.Hidden {
			if fds[i] < 0 {
				failed = append(failed, d.Path+": open failed")
				continue
			}
			lower = "/proc/self/fd/" + strconv.Itoa(fds[i])
		}
		if err := mountOverlay(lower, d.Path); err != nil {
			failed = append(failed, d.Path+": "+err.Error())
			continue
		}
		h.Overlaid = append(h.Overlaid, d.Path)
	}
	if len(failed) > 0 {
		h.Error = "not overlaid (their blocks mount their own): " + strings.Join(failed, "; ")
	}
	return h
}

// mountOverlay mounts lower and the empty layer "proc" on dst, read-only,
// nosuid, nodev, and noexec when lower's own mount is: the overlay a
// helper mounts itself (hook.mountOverlay), written again because package
// spawner may import only the standard library and x/sys (its heap is
// copied by every fork; internal/layering checks it). Paths that would
// need hook.escapeLayer are refused here instead; their blocks mount
// their own.
func mountOverlay(lower, dst string) error {
	if strings.ContainsAny(lower, ":,\\") {
		return syscall.EINVAL // would need escaping in the options
	}
	flags := uintptr(syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV)
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(lower, &sfs); err != nil {
		return err
	}
	const stNoexec = 0x8
	if sfs.Flags&stNoexec != 0 {
		flags |= syscall.MS_NOEXEC
	}
	return syscall.Mount("overlay", dst, "overlay", flags, "lowerdir="+lower+":proc")
}

// emptyMountFor picks the first of emptyMounts that exists and is neither
// one of dirs nor above or below one.
func emptyMountFor(dirs []OverlayDir) string {
	for _, m := range emptyMounts {
		if st, err := os.Lstat(m); err != nil || !st.IsDir() {
			continue
		}
		clash := false
		for _, d := range dirs {
			if d.Path == m || strings.HasPrefix(d.Path, m+"/") || strings.HasPrefix(m, d.Path+"/") {
				clash = true
				break
			}
		}
		if !clash {
			return m
		}
	}
	return ""
}
