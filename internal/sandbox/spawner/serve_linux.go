//go:build linux

package spawner

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// init turns this process into a spawner when it was started as one. It
// runs during package initialisation, before the heavier packages of the
// binary allocate anything: the smaller the spawner's heap, the cheaper
// each of its forks.
func init() {
	if v, ok := syscall.Getenv(EnvMarker); ok && v == "1" && len(os.Args) >= 3 && os.Args[1] == Marker {
		serve(os.Args[2:])
	}
}

// serve answers requests until the server closes its end. The main thread
// is locked during package initialisation, so every fork comes from the
// thread named unexecName.
func serve(argv []string) {
	name := []byte(unexecName + "\x00")
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0)
	exe, err := syscall.Dup(exeFD)
	// A high descriptor, so that ForkExec never dup2()s a child's
	// descriptor over it before execve has resolved the path.
	if err == nil {
		var high int
		high, err = fcntl(exe, syscall.F_DUPFD_CLOEXEC, 200)
		syscall.Close(exe)
		exe = high
	}
	if err != nil {
		os.Exit(2)
	}
	syscall.Close(exeFD)
	if _, err := fcntl(sockFD, syscall.F_SETFD, syscall.FD_CLOEXEC); err != nil {
		os.Exit(2)
	}
	path := "/proc/self/fd/" + strconv.Itoa(exe)
	h := hello()
	overlaid = h.Overlaid
	if err := sendHello(h); err != nil {
		os.Exit(0)
	}
	buf := make([]byte, maxMessage)
	oob := make([]byte, syscall.CmsgSpace(4*(maxFiles+1)))
	// busy is the time this loop has worked on requests, from a request's
	// arrival until it waits for the next one (the helper it forks ahead
	// included): while it works the next block's request waits.
	var busy time.Duration
	for {
		n, oobn, _, _, err := syscall.Recvmsg(sockFD, buf, oob, syscall.MSG_CMSG_CLOEXEC)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n == 0 {
			endIdle()
			os.Exit(0) // the server closed its end (or is gone)
		}
		t0 := time.Now()
		fds := receivedFDs(oob[:oobn])
		reply := spawn(path, argv, buf[:n], fds)
		for _, fd := range fds {
			syscall.Close(fd)
		}
		reply.Busy = busy + time.Since(t0)
		out, _ := json.Marshal(reply)
		if err := syscall.Sendmsg(sockFD, out, nil, nil, 0); err != nil {
			endIdle()
			os.Exit(0)
		}
		afterReply()
		busy += time.Since(t0)
	}
}

// overlaid are the directories this spawner overlaid in place (its Hello).
var overlaid []string

// hello makes the overlays the server asked for (EnvOverlay) and says
// which exist.
func hello() Hello {
	raw, ok := syscall.Getenv(EnvOverlay)
	if !ok || raw == "" {
		return Hello{}
	}
	var dirs []OverlayDir
	if err := json.Unmarshal([]byte(raw), &dirs); err != nil {
		return Hello{Error: "bad " + EnvOverlay + ": " + err.Error()}
	}
	return overlayInPlace(dirs)
}

func sendHello(h Hello) error {
	out, _ := json.Marshal(h)
	return syscall.Sendmsg(sockFD, out, nil, nil, 0)
}

// spawn decodes one request and clones its helper; the child's parent is
// the spawner's parent (CLONE_PARENT).
func spawn(path string, argv []string, msg []byte, fds []int) Reply {
	var req Request
	body, spec := msg, []byte(nil)
	if i := bytes.IndexByte(msg, 0); i >= 0 {
		body, spec = msg[:i], msg[i+1:] // a raw request's spec (Raw.Spec)
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return Reply{Errno: int(syscall.EINVAL), Error: "spawner: bad request: " + err.Error()}
	}
	if req.Raw != nil {
		req.Raw.Spec = spec
	}
	want := req.Files
	if req.CgroupFD {
		want++
	}
	if req.Files < 0 || want != len(fds) {
		return Reply{Errno: int(syscall.EINVAL), Error: "spawner: request names " + strconv.Itoa(want) +
			" descriptors, " + strconv.Itoa(len(fds)) + " attached"}
	}
	// Go's child checks its parent-death signal against the PID of the
	// process that forked it; a CLONE_PARENT child has another parent and
	// would kill itself, unless it is the init of a new PID namespace
	// (getppid is 0 there, and an init ignores its own SIGKILL).
	if req.Pdeathsig != 0 && req.Cloneflags&syscall.CLONE_NEWPID == 0 {
		return Reply{Errno: int(syscall.EINVAL), Error: "spawner: a parent-death signal needs CLONE_NEWPID"}
	}
	if req.Raw != nil {
		return spawnRaw(&req, fds)
	}
	sys := &syscall.SysProcAttr{
		Setsid:                     req.Setsid,
		Pdeathsig:                  req.Pdeathsig,
		Cloneflags:                 req.Cloneflags | syscall.CLONE_PARENT,
		UidMappings:                req.UIDMappings,
		GidMappings:                req.GIDMappings,
		GidMappingsEnableSetgroups: req.Setgroups,
		Credential:                 req.Credential,
		AmbientCaps:                req.AmbientCaps,
	}
	if req.CgroupFD {
		sys.UseCgroupFD, sys.CgroupFD = true, fds[req.Files]
	}
	files := make([]uintptr, req.Files)
	for i := range files {
		files[i] = uintptr(fds[i])
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: req.Env, Files: files, Sys: sys})
	if err != nil {
		errno, _ := err.(syscall.Errno)
		if errno == 0 {
			errno = syscall.EIO
		}
		return Reply{Errno: int(errno), Error: err.Error()}
	}
	return Reply{PID: pid}
}

func receivedFDs(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if got, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

func fcntl(fd, cmd, arg int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}
