//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"time"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
	"github.com/codellm/codellm/internal/sandbox/hook"
	"golang.org/x/sys/unix"
)

// An idleHelper is a helper started ahead of need (Config.PrestartHelpers)
// together with a pooled run group: cloned into fresh namespaces of its own
// (user, PID, mount, network, IPC, UTS), its uid maps written, its Go
// runtime started, already inside the group's first block cgroup, blocked
// in recvmsg on its spec socket with /dev/null as its stdio. It has run
// nothing of any block's and holds nothing but those descriptors. The first
// block of the run that takes the group gets it — its stdin, stdout, stderr
// and workdir by SCM_RIGHTS, then its spec — and from there on it is an
// ordinary helper: it builds that block's root, applies Landlock and
// seccomp and starts the program. It is never used for a second block and
// never returned; a run that does not use it, and Sandbox.Close, kill it.
//
// What moves off the request path is the clone (namespace creation, the
// copy of the server's page tables), the exec and the Go runtime start of
// the helper, and on cgroup v1 the block's cgroup.procs write; what the
// spec decides (the private root, the mounts, Landlock, seccomp, the
// program's fork) stays on it. The CPU per block is unchanged.
type idleHelper struct {
	osp   *os.Process
	sock  int // the server's end of the spec socket (blocking, close-on-exec)
	statR *os.File
	cl    cloneSpec
	group *cgroup.Group // the block group it sits in
	// prebuilt: it has built the block-independent part of a private root
	// (hook.prepareRoot) from prebuildSpec and adds only the block's parts.
	prebuilt bool
	overlaid []string // see launched.overlaid
}

// prebuildSpec is the spec a pre-started helper builds the block-independent
// part of its private root from (staging root, system directories, /etc,
// the shared dir, /dev, /proc, /tmp): that of a block with the Sandbox's
// defaults and no program or workdir of its own. nil without a private root.
func (s *Sandbox) prebuildSpec(cl cloneSpec, overlaid []string) []byte {
	if !cl.use.has(mRootFS) {
		return nil
	}
	r := &Run{sb: s, lim: s.cfg.Limits}
	hs, err := r.helperSpec(&Spec{Path: "/bin/true", Args: []string{"true"}, Dir: "/"}, cl.use, false)
	if err != nil {
		return nil
	}
	if overlaidRoot(cl.use) {
		hs.Overlaid = overlaid
	}
	return hs.Encode()
}

// sendPreSpec sends b length-prefixed (4 bytes, little endian; 0: none).
func sendPreSpec(sock int, b []byte) error {
	n := len(b)
	msg := append([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)}, b...)
	for len(msg) > 0 {
		w, err := unix.SendmsgN(sock, msg, nil, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		msg = msg[w:]
	}
	return nil
}

// fits reports whether the helper can serve a block with spec hs beyond
// its clone: a prebuilt root took its trees before the block existed, so a
// workdir the helper must open by path (persistent, unprivileged server)
// or other tmpfs sizes need a helper started for the block.
func (h *idleHelper) fits(hs *hook.Spec, tmpSize int64) bool {
	if !h.prebuilt {
		return true
	}
	return !(hs.Persist && !hs.DirIsTree) && hs.ProbeSocket == "" && hs.TmpSize == tmpSize
}

// prestartHelper clones an idle helper into block group child, for blocks
// with the Sandbox's default clone (defaultClone).
func (s *Sandbox) prestartHelper(child *cgroup.Group) (*idleHelper, error) {
	cl := s.defaultClone(child)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("spec socket: %w", err)
	}
	sockChild := os.NewFile(uintptr(pair[1]), "spec-socket")
	defer sockChild.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		unix.Close(pair[0])
		return nil, err
	}
	defer null.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	defer statW.Close()
	attr := helperAttr(cl, s.plat.euid, child)
	osp, overlaid, inside, err := s.plat.startHelper(append(helperEnv[:len(helperEnv):len(helperEnv)], hook.EnvPooled+"=1"),
		[]*os.File{null, null, null, sockChild, statW, null}, attr, overlaidRoot(cl.use))
	if err != nil {
		unix.Close(pair[0])
		statR.Close()
		return nil, startError(cl.use, inside, err)
	}
	h := &idleHelper{osp: osp, sock: pair[0], statR: statR, cl: cl, group: child, overlaid: overlaid}
	pre := s.prebuildSpec(cl, overlaid)
	if err := sendPreSpec(h.sock, pre); err != nil {
		h.discard()
		return nil, fmt.Errorf("send the pre-start spec: %w", err)
	}
	h.prebuilt = pre != nil
	if !inside {
		// v1 (or a helper the spawner cloned, or no clone3, on v2): move it
		// in now, off the request path, while it waits for its block.
		if err := child.Add(osp.Pid); err != nil {
			h.discard()
			return nil, fmt.Errorf("join block cgroup: %w", err)
		}
	}
	return h, nil
}

// defaultClone is the clone of a block with the Sandbox's defaults: the
// mechanisms of a run, the unprivileged host identity, no egress and no
// deterministic mode.
func (s *Sandbox) defaultClone(child *cgroup.Group) cloneSpec {
	p := &s.plat
	use := blockUse(p.runMechs(), s.cfg.Network, child)
	return cloneSpec{use: use, uid: p.hostUID, gid: p.hostGID, outside: p.noClone3}
}

// prestartable reports whether pooled run groups should carry an idle
// helper: the switch is on, the sandbox confines with a helper, and runs
// get no egress session (an egress block's clone keeps CAP_NET_ADMIN and
// gets a listener socket, so it is always started fresh).
func (s *Sandbox) prestartable() bool {
	p := &s.plat
	// A raw helper starts no runtime and so has nothing to hide by starting
	// early: pre-started helpers are Go helpers, for a Sandbox that uses those.
	goHelper := s.cfg.GoHelper || goHelperForTests
	return s.cfg.PrestartHelpers && goHelper && s.cfg.Mode != ModeOff && s.cfg.Egress == nil && p.avail.has(mHelper) && p.helperPath != ""
}

// launch hands the helper its block's descriptors; the spec follows with
// deliver. The helper is inside its block group already. An error means
// the helper died while it waited (nothing of the block reached it).
func (h *idleHelper) launch(bf *blockFiles) (*launched, error) {
	start := time.Now()
	fds := make([]int, 0, 4)
	for _, f := range bf.list() {
		fds = append(fds, int(f.Fd()))
	}
	if err := unix.Sendmsg(h.sock, []byte{0}, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		return nil, err
	}
	sock := h.sock
	h.sock = -1
	deliver := func(b []byte) error {
		defer unix.Close(sock)
		for len(b) > 0 {
			n, err := unix.SendmsgN(sock, b, nil, nil, unix.MSG_NOSIGNAL)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err // the helper is gone; its status pipe and wait status say why
			}
			b = b[n:]
		}
		return nil
	}
	return &launched{osp: h.osp, statR: h.statR, start: start, joined: true, pooled: true, deliver: deliver, overlaid: h.overlaid}, nil
}

// discard kills an unused idle helper, reaps it and closes its
// descriptors. It has done nothing but wait, so nothing else is left.
func (h *idleHelper) discard() {
	if h.sock >= 0 {
		unix.Close(h.sock)
	}
	killWait(h.osp)
	h.statR.Close()
}
