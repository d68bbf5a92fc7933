//go:build linux

package spawner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is returned for a request the spawner does not take (an
// attribute it does not carry, or a parent-death signal without a new PID
// namespace); the caller starts the process itself.
var ErrUnsupported = errors.New("spawner: request not supported")

// ErrClosed is returned once the spawner is closed or has failed; the
// caller starts the process itself.
var ErrClosed = errors.New("spawner: closed")

// StartFunc starts the spawner process. The helpers it clones have the
// spawner's parent thread as theirs, and their parent-death signal fires
// when that thread ends, so it must be a thread that lives as long as the
// process (see sandbox.startOnStableThread).
type StartFunc func(path string, argv []string, attr *os.ProcAttr) (*os.Process, error)

// Spawner is the server's handle on one spawner process. Its methods are
// safe for concurrent use; requests are answered one at a time.
type Spawner struct {
	mu    sync.Mutex
	conn  *net.UnixConn // nil once closed or failed
	proc  *os.Process
	hello Hello
	stats Stats
}

// Stats are a spawner's counters since it started: how many requests it
// answered, how long callers held it for their round trips (request sent to
// reply read, waits to be woken included) and how long its own loop worked
// on them. Whichever is longer bounds the requests one spawner serves a
// second.
type Stats struct {
	Requests int64
	Held     time.Duration
	Busy     time.Duration
}

// Add sums two spawners' counters.
func (s Stats) Add(o Stats) Stats {
	return Stats{Requests: s.Requests + o.Requests, Held: s.Held + o.Held, Busy: s.Busy + o.Busy}
}

// Stats returns the spawner's counters (those it had when it was closed,
// once closed).
func (s *Spawner) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// helloTimeout bounds the wait for a new spawner's first message (its
// runtime start and overlays: milliseconds).
const helloTimeout = 10 * time.Second

// Start starts a spawner that clones children exec'ing exe with argv.
// self is the path of this program's own binary (the spawner is a
// re-execution of it); exe stays open in the caller. overlay lists host
// directories the spawner should overlay in place (root only; see
// [Spawner.Overlaid] for what it did).
func Start(start StartFunc, self string, exe *os.File, argv []string, overlay []OverlayDir) (*Spawner, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("spawner: socket pair: %w", err)
	}
	ours := os.NewFile(uintptr(pair[0]), "spawner")
	theirs := os.NewFile(uintptr(pair[1]), "spawner-peer")
	defer theirs.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		ours.Close()
		return nil, err
	}
	defer null.Close()
	env := []string{EnvMarker + "=1", "GOMAXPROCS=1"}
	if len(overlay) > 0 {
		b, err := json.Marshal(overlay)
		if err != nil {
			ours.Close()
			return nil, fmt.Errorf("spawner: overlay list: %w", err)
		}
		env = append(env, EnvOverlay+"="+string(b))
	}
	proc, err := start(self, append([]string{"codellm-spawner", Marker}, argv...), &os.ProcAttr{
		Env:   env,
		Files: []*os.File{null, null, os.Stderr, theirs, exe},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("spawner: start: %w", err)
	}
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, fmt.Errorf("spawner: socket: %w", err)
	}
	s := &Spawner{conn: c.(*net.UnixConn), proc: proc}
	if s.hello, err = s.readHello(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("spawner: %w", err)
	}
	// A Spawner dropped without Close: the socket's finalizer would end the
	// spawner and leave it a zombie of this process. End it and reap it.
	runtime.AddCleanup(s, func(st abandoned) {
		_ = st.conn.Close()
		go func() { _, _ = st.proc.Wait() }()
	}, abandoned{s.conn, proc})
	return s, nil
}

// abandoned is what the cleanup of an unclosed Spawner needs.
type abandoned struct {
	conn *net.UnixConn
	proc *os.Process
}

func (s *Spawner) readHello() (Hello, error) {
	var h Hello
	_ = s.conn.SetReadDeadline(time.Now().Add(helloTimeout))
	defer s.conn.SetReadDeadline(time.Time{})
	return h, s.readMessage(&h, "hello")
}

// Overlaid lists the directories the spawner overlaid in place.
func (s *Spawner) Overlaid() []string { return s.hello.Overlaid }

// Why is the spawner's reason for every directory it did not overlay.
func (s *Spawner) Why() string { return s.hello.Error }

// PID is the spawner process's PID (0 once closed).
func (s *Spawner) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return 0
	}
	return s.proc.Pid
}

// Spawn clones a child of the calling process: files become its
// descriptors 0..n-1, sys the attributes of its clone. The returned Process
// is the caller's child, as from os.StartProcess. ErrUnsupported and
// ErrClosed mean nothing was started and the caller should start it itself;
// any other error is the clone's own (a *os.PathError around its errno).
//
// A clone into a cgroup (sys.UseCgroupFD, cgroup v2) is ErrUnsupported:
// Go's syscall package makes it with clone3 and always asks for SIGCHLD
// as the exit signal, which clone3 refuses together with CLONE_PARENT
// (EINVAL: the kernel gives such a child its caller's exit signal). The
// raw helper's own clone3 (SpawnRaw) leaves the signal out.
func (s *Spawner) Spawn(env []string, files []*os.File, sys *syscall.SysProcAttr) (*os.Process, error) {
	if sys != nil && sys.UseCgroupFD {
		return nil, fmt.Errorf("%w: a clone into a cgroup (clone3 refuses CLONE_PARENT with Go's exit signal)", ErrUnsupported)
	}
	req, err := request(env, files, sys)
	if err != nil {
		return nil, err
	}
	return s.send(req, files, sys)
}

// ErrFallback is returned by SpawnRaw for a block the raw helper does not
// serve (the error says why); nothing was started, and the caller starts
// the Go helper.
var ErrFallback = errors.New("spawner: the raw helper does not serve this block")

// SpawnRaw clones the raw helper (package rawhelper) for the block raw
// describes, with files stdin, stdout, stderr, the status pipe and the
// workdir (and a block with egress, its end of the listener's socket
// pair), and the namespaces, maps, parent-death signal and cgroup of
// sys; its other attributes are the raw helper's own business. Errors as
// Spawn's, and ErrFallback.
func (s *Spawner) SpawnRaw(raw *Raw, files []*os.File, sys *syscall.SysProcAttr) (*os.Process, error) {
	if len(files) != RawFiles && len(files) != RawFiles+1 {
		return nil, fmt.Errorf("%w: a raw request needs %d descriptors (one more with egress)", ErrUnsupported, RawFiles)
	}
	req, err := request(nil, files, sys)
	if err != nil {
		return nil, err
	}
	req.Credential, req.AmbientCaps, req.Raw = nil, nil, raw
	return s.send(req, files, sys)
}

// send makes one round trip for req and turns the reply into the child.
func (s *Spawner) send(req Request, files []*os.File, sys *syscall.SysProcAttr) (*os.Process, error) {
	payload, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if req.Raw != nil {
		payload = append(append(payload, 0), req.Raw.Spec...)
		if len(payload) > maxMessage {
			return nil, fmt.Errorf("%w: a raw request of %d bytes", ErrUnsupported, len(payload))
		}
	}
	fds := make([]int, 0, len(files)+1)
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	if sys.UseCgroupFD {
		fds = append(fds, sys.CgroupFD)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil, ErrClosed
	}
	t0 := time.Now()
	reply, err := s.roundTrip(payload, unix.UnixRights(fds...))
	s.stats.Requests++
	s.stats.Held += time.Since(t0)
	s.stats.Busy = max(s.stats.Busy, reply.Busy)
	runtime.KeepAlive(files)
	if err != nil {
		s.stopLocked()
		return nil, fmt.Errorf("%w: %v", ErrClosed, err)
	}
	reapDiscarded(reply.Discarded)
	if reply.Fallback != "" {
		return nil, fmt.Errorf("%w: %s", ErrFallback, reply.Fallback)
	}
	if reply.PID <= 0 {
		reapUnexeced()
		errno := syscall.Errno(reply.Errno)
		if errno == 0 {
			errno = syscall.EIO
		}
		return nil, &os.PathError{Op: "fork/exec", Path: "helper (spawner: " + reply.Error + ")", Err: errno}
	}
	return os.FindProcess(reply.PID)
}

func (s *Spawner) roundTrip(payload, oob []byte) (Reply, error) {
	var reply Reply
	if _, _, err := s.conn.WriteMsgUnix(payload, oob, nil); err != nil {
		return reply, err
	}
	return reply, s.readMessage(&reply, "reply")
}

// readMessage reads one JSON message of the spawner's (a reply or its
// hello) into v.
func (s *Spawner) readMessage(v any, what string) error {
	buf := make([]byte, maxReply)
	n, _, _, _, err := s.conn.ReadMsgUnix(buf, nil)
	if err != nil {
		return fmt.Errorf("no %s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("spawner exited before its %s", what)
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		return fmt.Errorf("bad %s: %w", what, err)
	}
	return nil
}

// request checks that sys asks only for what the spawner carries.
func request(env []string, files []*os.File, sys *syscall.SysProcAttr) (Request, error) {
	if sys == nil || sys.Chroot != "" || sys.Ptrace || sys.Setpgid || sys.Setctty || sys.Noctty ||
		sys.Foreground || sys.Unshareflags != 0 || sys.PidFD != nil {
		return Request{}, ErrUnsupported
	}
	if sys.Pdeathsig != 0 && sys.Cloneflags&syscall.CLONE_NEWPID == 0 {
		return Request{}, ErrUnsupported
	}
	if len(files) > maxFiles {
		return Request{}, ErrUnsupported
	}
	for _, f := range files {
		if f == nil {
			return Request{}, ErrUnsupported
		}
	}
	return Request{
		Env: env, Files: len(files), CgroupFD: sys.UseCgroupFD,
		Setsid: sys.Setsid, Pdeathsig: sys.Pdeathsig, Cloneflags: sys.Cloneflags,
		UIDMappings: sys.UidMappings, GIDMappings: sys.GidMappings, Setgroups: sys.GidMappingsEnableSetgroups,
		Credential: sys.Credential, AmbientCaps: sys.AmbientCaps,
	}, nil
}

// Close ends the spawner and reaps it. The children it started are the
// caller's and are not affected.
func (s *Spawner) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	return nil
}

// stopLocked closes the socket, which ends the spawner's loop, and reaps
// the spawner; one that has not gone within a second is killed.
func (s *Spawner) stopLocked() {
	if s.conn == nil {
		return
	}
	_ = s.conn.Close()
	s.conn = nil
	kill := time.AfterFunc(time.Second, func() { _ = s.proc.Signal(syscall.SIGKILL) })
	_, _ = s.proc.Wait()
	kill.Stop()
	// Its idle raw helper, which it killed and saw end before it exited (endIdle).
	reapZombiesNamed(idleName)
}

// reapUnexeced reaps the children of this process that a spawner forked
// but that failed before their exec (they still carry the spawner's thread
// name): the spawner's ForkExec cannot wait for them, they are ours.
func reapUnexeced() { reapZombiesNamed(unexecName) }

// reapZombiesNamed reaps the zombie children of this process named name.
func reapZombiesNamed(name string) {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if zombieNamed(pid, name) {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			}
		}
	}
}

// zombieNamed reports whether pid is a zombie named name.
func zombieNamed(pid int, name string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || len(s) < end+3 {
		return false
	}
	return s[open+1:end] == name && s[end+2] == 'Z'
}

// reapDiscarded reaps the idle raw helpers the spawner killed unused.
func reapDiscarded(pids []int) {
	for _, pid := range pids {
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
	}
}
