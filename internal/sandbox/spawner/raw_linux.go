//go:build linux && (amd64 || arm64)

package spawner

import (
	"errors"
	"strconv"
	"syscall"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/rawchild"
	"github.com/codellm/codellm/internal/sandbox/rawhelper"
)

// fd is a received descriptor as rawchild takes it (not an *os.File,
// whose cleanup would close a number serve closes itself).
type fd int

func (f fd) Fd() uintptr { return uintptr(f) }

// prog is compiled into for every raw request (they come one at a time):
// its memory is reused, so the spawner writes few pages per block (each a
// copy-on-write fault while an earlier raw helper, a fork of it, lives).
var prog rawchild.Prog

// rawName is a raw helper's name: never unexecName, so that reapUnexeced
// (which reaps zombies by that name) cannot take a helper the server waits
// for.
const rawName = "codellm-raw"

// spawnRaw compiles the raw request's spec and forks the raw helper, the
// server's child (CLONE_PARENT). fds are stdin, stdout, stderr, the
// status pipe and the workdir, then the cgroup's when req.CgroupFD.
func spawnRaw(req *Request, fds []int) Reply {
	if req.Files != RawFiles {
		return Reply{Errno: int(syscall.EINVAL), Error: "spawner: a raw request carries " + strconv.Itoa(RawFiles) + " descriptors"}
	}
	sp, err := hook.Decode(req.Raw.Spec)
	if err != nil {
		return Reply{Errno: int(syscall.EINVAL), Error: "spawner: bad raw spec: " + err.Error()}
	}
	program, err := rawhelper.Compile(&prog, sp, rawhelper.Host{Overlaid: overlaid, CgroupFiles: req.Raw.CgroupFiles,
		UID: req.Raw.UID, GID: req.Raw.GID, Dir: fds[4]})
	if fe, ok := err.(*rawhelper.FallbackError); ok {
		return Reply{Fallback: fe.Reason}
	}
	if err != nil {
		return Reply{Errno: int(syscall.EINVAL), Error: err.Error()}
	}
	a := rawchild.Attr{Name: rawName, Cloneflags: req.Cloneflags, Pdeathsig: req.Pdeathsig, Parent: true,
		UIDMap: idMap(req.UIDMappings), GIDMap: idMap(req.GIDMappings),
		Stdin: fd(fds[0]), Stdout: fd(fds[1]), Stderr: fd(fds[2]), Status: fd(fds[3]), Extra: []rawchild.FD{fd(fds[4])}}
	if req.CgroupFD {
		a.UseCgroupFD, a.CgroupFD = true, fds[req.Files]
	}
	pid, err := rawchild.Start(&prog, program, a)
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		return Reply{Errno: int(errno), Error: err.Error()}
	}
	return Reply{PID: pid}
}

// idMap is the map file's text of ms ("" for none).
func idMap(ms []syscall.SysProcIDMap) string {
	var s string
	for _, m := range ms {
		s += strconv.Itoa(m.ContainerID) + " " + strconv.Itoa(m.HostID) + " " + strconv.Itoa(m.Size) + "\n"
	}
	return s
}
