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
// server's child (CLONE_PARENT), or hands it to the helper forked ahead.
// fds are stdin, stdout, stderr, the status pipe and the workdir (and the
// egress socket), then the cgroup's when req.CgroupFD.
func spawnRaw(req *Request, fds []int) Reply {
	if req.Files != RawFiles && req.Files != RawFiles+1 {
		return Reply{Errno: int(syscall.EINVAL), Error: "spawner: a raw request carries " + strconv.Itoa(RawFiles) + " descriptors, or one more for egress"}
	}
	sp, err := hook.Decode(req.Raw.Spec)
	if err != nil {
		return Reply{Errno: int(syscall.EINVAL), Error: "spawner: bad raw spec: " + err.Error()}
	}
	// The clone makes the user and PID namespaces; the helper unshares the
	// rest itself, off this loop (the network namespace alone was a quarter
	// of the spawner's CPU, and its clone sleeps on kernel locks meanwhile),
	// and the helper forked ahead has done so while it waited.
	a := rawchild.Attr{Name: rawName, Cloneflags: req.Cloneflags & rawhelper.AtClone, Pdeathsig: req.Pdeathsig, Parent: true,
		UIDMap: idMap(req.UIDMappings), GIDMap: idMap(req.GIDMappings), IdleUnshare: req.Cloneflags &^ rawhelper.AtClone,
		Stdin: fd(fds[0]), Stdout: fd(fds[1]), Stderr: fd(fds[2]), Status: fd(fds[3])}
	for _, x := range fds[4:req.Files] { // the workdir, and the egress socket (rawhelper.NetFD)
		a.Extra = append(a.Extra, fd(x))
	}
	h := rawhelper.Host{Overlaid: overlaid, CgroupFiles: req.Raw.CgroupFiles, UID: req.Raw.UID, GID: req.Raw.GID, Dir: fds[4]}
	var discarded []int
	if req.CgroupFD {
		a.UseCgroupFD, a.CgroupFD = true, fds[req.Files]
	} else if idle != nil {
		pid, gone, ok, reply := runIdle(a, sp, h)
		if ok || reply != nil {
			if reply != nil {
				return *reply
			}
			return Reply{PID: pid}
		}
		discarded = gone
	}
	h.Unshare = a.IdleUnshare
	program, err := rawhelper.Compile(&prog, sp, h)
	if reply := compileReply(err); reply != nil {
		reply.Discarded = discarded
		return *reply
	}
	pid, err := rawchild.Start(&prog, program, a)
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		return Reply{Errno: int(errno), Error: err.Error(), Discarded: discarded}
	}
	if !req.CgroupFD {
		next = &a // the next block is likely one like it: fork its helper after this reply
	}
	return Reply{PID: pid, Discarded: discarded}
}

// compileReply is the reply for a compile that failed (nil when it did not).
func compileReply(err error) *Reply {
	if fe, ok := err.(*rawhelper.FallbackError); ok {
		return &Reply{Fallback: fe.Reason}
	}
	if err != nil {
		return &Reply{Errno: int(syscall.EINVAL), Error: err.Error()}
	}
	return nil
}

// The raw helper forked ahead (rawchild.Prefork): after each reply the
// spawner forks one for a block like the last (its namespaces, maps and
// parent-death signal), so that the next such block's clone is off the
// request path. Only without clone3's cgroup placement (cgroup v1, where the
// helper joins its group in a step): the group is not known ahead.
var (
	idle    *rawchild.Idle
	idleKey string
	next    *rawchild.Attr
)

func attrKey(a rawchild.Attr) string {
	return strconv.FormatUint(uint64(a.Cloneflags), 16) + "|" + strconv.FormatUint(uint64(a.IdleUnshare), 16) + "|" +
		strconv.Itoa(int(a.Pdeathsig)) + "|" + a.UIDMap + "|" + a.GIDMap
}

// runIdle hands the block to the idle helper when it was forked for a block
// like this one, compiled without the namespaces it made while it waited.
// gone lists an idle helper given up (killed; the server reaps it); reply
// is set when the compile failed.
func runIdle(a rawchild.Attr, sp *hook.Spec, h rawhelper.Host) (pid int, gone []int, ok bool, reply *Reply) {
	it := idle
	idle = nil
	if idleKey == attrKey(a) {
		program, err := rawhelper.Compile(&prog, sp, h)
		if reply = compileReply(err); reply != nil {
			it.Close()
			reply.Discarded = []int{it.PID}
			return 0, nil, false, reply
		}
		if err := it.Run(&prog, program, rawName, append([]rawchild.FD{a.Stdin, a.Stdout, a.Stderr, a.Status}, a.Extra...)); err == nil {
			next = &a
			return it.PID, nil, true, nil
		}
	}
	it.Close()
	return 0, []int{it.PID}, false, nil
}

// afterReply forks the idle helper the last block asked for (next), off
// that block's path.
func afterReply() {
	if next == nil || idle != nil {
		return
	}
	a := *next
	next = nil
	a.Name, a.Stdin, a.Stdout, a.Stderr, a.Status, a.Extra = idleName, nil, nil, nil, nil, nil
	if it, err := rawchild.Prefork(&prog, a); err == nil {
		idle, idleKey = it, attrKey(a)
	}
}

// endIdle kills the idle helper as the spawner ends and waits (briefly)
// until it is gone, so that the server, which never learnt its PID, finds
// it a zombie by its name once it has reaped the spawner.
func endIdle() {
	if idle != nil {
		idle.CloseWait(idleGrace)
		idle = nil
	}
}

// idMap is the map file's text of ms ("" for none).
func idMap(ms []syscall.SysProcIDMap) string {
	var s string
	for _, m := range ms {
		s += strconv.Itoa(m.ContainerID) + " " + strconv.Itoa(m.HostID) + " " + strconv.Itoa(m.Size) + "\n"
	}
	return s
}
