//go:build linux

package sandbox

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/rawchild"
	"github.com/codellm/codellm/internal/sandbox/spawner"
)

// rawCandidate reports whether a block may get the raw helper, as far as
// the server can tell: not switched off (by configuration, or by a kernel
// facility it needs that the host lacks: platform.rawOff), its own user
// namespace, not the trial spawn, and a collect only as root. The spawner
// decides the rest (package rawhelper) and says so when the block needs the
// Go helper after all.
//
// A collect reads the held namespace through /proc/<init>/root, which a
// non-dumpable process opens only to a caller with CAP_SYS_PTRACE in the
// user namespace its memory was made in: for the raw helper, a fork, the
// spawner's (root has it there); for the Go helper, exec'd inside the
// block's namespace, the block's, which an unprivileged server owns.
func (r *Run) rawCandidate(spec *Spec, cl cloneSpec, hs *hook.Spec) bool {
	return !r.sb.cfg.GoHelper && !goHelperForTests && r.sb.plat.rawOff == "" && cl.use.has(mUserNS) && !hs.ProbeOnly &&
		(spec.Collect == nil || r.sb.plat.euid == 0) && r.sb.plat.helperPath != ""
}

// goHelperForTests makes every Sandbox use the Go helper, as
// Config.GoHelper does one: the package's TestMain sets it from
// CODELLM_TEST_GO_HELPER=1, so that the whole suite (the threat-model
// tests among it) runs against each helper.
var goHelperForTests bool

// rawStart has the spawner fork the raw helper for the block, already
// inside child (clone3 on v2; on v1 the helper joins it as its first
// step). ok false, with no error, means the block gets the Go helper: no
// spawner, or the spawner's compiler refused the spec.
func (r *Run) rawStart(cl cloneSpec, bf *blockFiles, hs *hook.Spec, child *cgroup.Group) (hl *launched, ok bool, err error) {
	p := &r.sb.plat
	served, err := p.spawner.do(p.helperPath, overlaidRoot(cl.use), func(sp *spawner.Spawner) (err error) {
		hl, err = r.rawSpawn(sp, cl, bf, hs, child)
		return err
	})
	switch {
	case !served:
		return nil, false, nil
	case errors.Is(err, spawner.ErrFallback) || errors.Is(err, spawner.ErrUnsupported):
		r.sb.noteFallback(err)
		return nil, false, nil
	case err != nil:
		return nil, true, startError(cl.use, bornInto(child), err)
	}
	return hl, true, nil
}

func (r *Run) rawSpawn(sp *spawner.Spawner, cl cloneSpec, bf *blockFiles, hs *hook.Spec, child *cgroup.Group) (*launched, error) {
	attr := helperAttr(cl, r.sb.plat.euid, child)
	raw := &spawner.Raw{Spec: hs.Encode(), UID: sandboxUID, GID: sandboxGID}
	if child != nil && !attr.UseCgroupFD {
		// The raw helper is single-threaded: it joins by its thread (see TaskFiles).
		if raw.CgroupFiles = child.TaskFiles(); raw.CgroupFiles == nil {
			raw.CgroupFiles = child.ProcsFiles()
		}
	}
	netParent, netChild, err := egressFiles(cl)
	if err != nil {
		return nil, err
	}
	defer closeIfSet(netChild)
	files := []*os.File{bf.stdin, bf.stdout, bf.stderr, nil, bf.dir}
	if netChild != nil {
		files = append(files, netChild) // rawhelper.NetFD
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		closeIfSet(netParent)
		return nil, err
	}
	files[3] = statW
	start := time.Now()
	Trace("s.raw")
	osp, err := sp.SpawnRaw(raw, files, attr)
	Trace("s.rawforked")
	statW.Close()
	if err != nil {
		statR.Close()
		closeIfSet(netParent)
		return nil, err
	}
	// Its spec went compiled: the spawner binds the overlays it made itself (rawhelper.Host.Overlaid).
	return &launched{osp: osp, statR: statR, start: start, joined: true, raw: true, netParent: netParent}, nil
}

// noteFallback logs, once per Sandbox, the first reason a block got the
// Go helper instead of the raw one (debug: it is a choice, not a fault).
func (s *Sandbox) noteFallback(err error) {
	s.plat.fallback.Do(func() {
		if s.log != nil {
			s.log.Debug("sandbox: a block got the Go helper", "reason", err.Error())
		}
	})
}

// staleMountsError is a raw helper's overlay the kernel refused with
// EINVAL, as it refuses a lower layer with mounts below it: the server's
// mount table (hostMounts) missed a mount made since it last read it.
type staleMountsError struct{ err error }

func (e *staleMountsError) Error() string { return e.err.Error() }

// overlayRefused reports whether msg is a raw helper's failure to mount an
// overlay with EINVAL (see staleMountsError).
func overlayRefused(msg []byte) bool {
	if len(msg) == 0 || msg[0] != rawchild.KindFailed {
		return false
	}
	rec, err := rawchild.ReadRecord(bytes.NewReader(msg))
	if err != nil {
		return false
	}
	se := rec.Err()
	return se != nil && se.Tag == hook.MOverlay && se.Errno == syscall.EINVAL
}

// rawFailure is the failure a raw helper reported ('F' record), or nil
// when msg is not one.
func rawFailure(msg []byte) error {
	if len(msg) > 1 && msg[0] == rawchild.KindStarted && msg[1] == rawchild.KindFailed {
		msg = msg[1:] // a program exec'd directly (no init) failed its exec after Started
	}
	if len(msg) == 0 || msg[0] != rawchild.KindFailed {
		return nil
	}
	rec, err := rawchild.ReadRecord(bytes.NewReader(msg))
	if err != nil {
		return &UnavailableError{Mechanism: MechHelper, Reason: "raw helper: " + err.Error(), Fix: mechFix(mHelper)}
	}
	se := rec.Err()
	if se.Tag == hook.MExec {
		return &UnavailableError{Mechanism: "exec", Reason: se.What + ": " + se.Errno.Error(),
			Fix: "the program must exist inside the sandbox (under /usr, /bin, /sbin or /lib*) and be executable"}
	}
	reason := se.What + ": " + se.Errno.Error()
	if se.Tag == hook.MRootFS {
		reason = "build root filesystem: " + reason
		if se.Errno == syscall.ENOSPC && strings.HasPrefix(se.What, "copy workdir") {
			reason = hook.ErrWorkdirTooLargeText + " (" + se.What + ": " + se.Errno.Error() + ")"
		}
	}
	return &UnavailableError{Mechanism: mechName(mechSet(se.Tag)), Reason: reason, Fix: mechFix(mechSet(se.Tag))}
}
