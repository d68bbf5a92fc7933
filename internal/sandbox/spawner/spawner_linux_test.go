//go:build linux

package spawner

import (
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stableStart is os.StartProcess from a thread locked for the life of the
// test binary, as the spawner's StartFunc requires.
var stableStart = func() StartFunc {
	type req struct {
		path string
		argv []string
		attr *os.ProcAttr
		res  chan any
	}
	ch := make(chan req)
	go func() {
		runtime.LockOSThread() // never unlocked
		for r := range ch {
			p, err := os.StartProcess(r.path, r.argv, r.attr)
			if err != nil {
				r.res <- err
			} else {
				r.res <- p
			}
		}
	}()
	return func(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
		res := make(chan any, 1)
		ch <- req{path, argv, attr, res}
		switch v := (<-res).(type) {
		case error:
			return nil, v
		default:
			return v.(*os.Process), nil
		}
	}
}()

// startShell starts a spawner whose children run `sh -c "$SCRIPT"`.
func startShell(t testing.TB) *Spawner {
	t.Helper()
	return startOverlaid(t, nil)
}

// startOverlaid is startShell with a spawner that overlays dirs in place.
func startOverlaid(t testing.TB, dirs []OverlayDir) *Spawner {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := os.Open("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh")
	}
	defer sh.Close()
	s, err := Start(stableStart, self, sh, []string{"sh", "-c", `eval "$SCRIPT"`}, dirs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// userNS is a clone into new user and PID namespaces, mapped to nobody.
func userNS() *syscall.SysProcAttr {
	if os.Geteuid() != 0 {
		return nil
	}
	return &syscall.SysProcAttr{
		Setsid: true, Pdeathsig: syscall.SIGKILL,
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
}

func pipes(t *testing.T) (stdinR, stdinW, outR, outW *os.File) {
	t.Helper()
	var err error
	if stdinR, stdinW, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	if outR, outW, err = os.Pipe(); err != nil {
		t.Fatal(err)
	}
	return
}

func TestSpawnedChildIsTheCallers(t *testing.T) {
	sys := userNS()
	if sys == nil {
		t.Skip("needs root for the uid map")
	}
	s := startShell(t)
	inR, inW, outR, outW := pipes(t)
	p, err := s.Spawn([]string{"SCRIPT=echo pid=$$ uid=$(id -u); cat"}, []*os.File{inR, outW, outW}, sys)
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	// While it waits on stdin: its parent is this process, not the spawner.
	if ppid := parentOf(t, p.Pid); ppid != os.Getpid() {
		t.Errorf("parent of the child is %d, want this process %d (spawner %d)", ppid, os.Getpid(), s.PID())
	}
	inW.Close()
	out, _ := io.ReadAll(outR)
	st, err := p.Wait()
	if err != nil || !st.Success() {
		t.Fatalf("wait: %v %v", st, err)
	}
	// PID 1 of its own namespace, uid 0 there (nobody outside).
	if got := strings.TrimSpace(string(out)); got != "pid=1 uid=0" {
		t.Errorf("child said %q, want pid=1 uid=0", got)
	}
}

func TestFailedCloneLeavesNoZombie(t *testing.T) {
	sys := userNS()
	if sys == nil {
		t.Skip("needs root for the uid map")
	}
	s := startShell(t)
	// uid 4242 is not mapped in the child's user namespace: its setuid
	// fails after the fork, before exec, so the child exits as a zombie of
	// this process that the spawner's ForkExec cannot wait for.
	sys.Credential = &syscall.Credential{Uid: 4242, Gid: 4242, NoSetGroups: true}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	_, err = s.Spawn(nil, []*os.File{null, null, null}, sys)
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Spawn: %v, want EINVAL from the child's setuid", err)
	}
	if z := zombies(t); len(z) != 0 {
		t.Fatalf("zombie children left: %v", z)
	}
	// The spawner is still serving.
	sys.Credential = nil
	p, err := s.Spawn([]string{"SCRIPT=exit 3"}, []*os.File{null, null, null}, sys)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := p.Wait(); st.ExitCode() != 3 {
		t.Fatalf("exit %v, want 3", st)
	}
}

func TestUnsupportedRequests(t *testing.T) {
	s := startShell(t)
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	for name, sys := range map[string]*syscall.SysProcAttr{
		"nil":                        nil,
		"setpgid":                    {Setpgid: true},
		"parent-death without pidns": {Pdeathsig: syscall.SIGKILL},
		"unshare":                    {Unshareflags: syscall.CLONE_NEWNS},
		// Go's clone3 always sets an exit signal, which CLONE_PARENT refuses.
		"into a cgroup": {UseCgroupFD: true, CgroupFD: int(null.Fd())},
	} {
		if _, err := s.Spawn(nil, []*os.File{null}, sys); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	if _, err := s.Spawn(nil, []*os.File{nil}, &syscall.SysProcAttr{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("nil file: %v, want ErrUnsupported", err)
	}
}

func TestCloseEndsTheSpawner(t *testing.T) {
	s := startShell(t)
	pid := s.PID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("spawner %d after Close: kill 0 = %v, want ESRCH (exited and reaped)", pid, err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if _, err := s.Spawn(nil, []*os.File{null}, &syscall.SysProcAttr{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Spawn after Close: %v, want ErrClosed", err)
	}
}

func TestKilledSpawnerReportsClosed(t *testing.T) {
	s := startShell(t)
	pid := s.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if _, err := s.Spawn([]string{"SCRIPT=true"}, []*os.File{null, null, null}, &syscall.SysProcAttr{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Spawn through a killed spawner: %v, want ErrClosed", err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("killed spawner %d not reaped: %v", pid, err)
	}
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// zombies lists this process's zombie children.
func zombies(t *testing.T) []int {
	t.Helper()
	var out []int
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			st, err := os.ReadFile("/proc/" + f + "/stat")
			if err == nil {
				s := string(st)
				if i := strings.LastIndexByte(s, ')'); i > 0 && len(s) > i+2 && s[i+2] == 'Z' {
					out = append(out, pid)
				}
			}
		}
	}
	return out
}

// A Spawner dropped without Close ends its process and reaps it once the
// garbage collector finds it: no zombie of this process is left.
func TestDroppedSpawnerIsReaped(t *testing.T) {
	pid := func() int {
		s := startShell(t)
		return s.PID()
	}()
	// startShell's cleanup holds it until the test ends; a Spawner made
	// here without one shows the drop.
	self, _ := os.Executable()
	sh, err := os.Open("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh")
	}
	s, err := Start(stableStart, self, sh, []string{"sh"}, nil)
	sh.Close()
	if err != nil {
		t.Fatal(err)
	}
	dropped := s.PID()
	s = nil
	for i := 0; i < 200; i++ {
		runtime.GC()
		if syscall.Kill(dropped, 0) == syscall.ESRCH {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := syscall.Kill(dropped, 0); err != syscall.ESRCH {
		t.Fatalf("dropped spawner %d still there (%v): %v", dropped, err, zombies(t))
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("the spawner still held (%d) ended too", pid)
	}
}
