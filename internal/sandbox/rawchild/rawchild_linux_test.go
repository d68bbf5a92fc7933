//go:build linux && (amd64 || arm64)

package rawchild

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if os.Getenv(envGoInit) == "1" {
		goInit(os.Args[1:])
	}
	if v := os.Getenv(envSpawn); v != "" {
		spawnAndExit(v == "parent", os.Getenv(envSpawnCgroup))
	}
	goleak.VerifyTestMain(m)
}

// child is one started child and the ends the test reads.
type child struct {
	pid    int
	status *os.File // the records
	stdout *os.File
}

// start runs p and prog in a child with the given clone flags (and, with
// CLONE_NEWUSER, the caller's identity mapped to root) and stdin.
func start(t *testing.T, p *Prog, prog Program, flags uintptr, stdin *os.File) child {
	t.Helper()
	a := Attr{Cloneflags: flags}
	if stdin != nil {
		a.Stdin = stdin
	}
	return startAttr(t, p, prog, a)
}

// startAttr is start with the rest of a (a cgroup, extra descriptors,
// other maps); stdout, stderr and the status are the test's pipes, stdin
// /dev/null unless a has one.
func startAttr(t *testing.T, p *Prog, prog Program, a Attr) child {
	t.Helper()
	statR, statW := pipe(t)
	outR, outW := pipe(t)
	if a.Stdin == nil {
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { null.Close() })
		a.Stdin = null
	}
	a.Stdout, a.Stderr, a.Status, a.Pdeathsig = outW, outW, statW, syscall.SIGKILL
	if a.Cloneflags&syscall.CLONE_NEWUSER != 0 && a.UIDMap == "" {
		a.UIDMap = "0 " + strconv.Itoa(os.Getuid()) + " 1"
		a.GIDMap = "0 " + strconv.Itoa(os.Getgid()) + " 1"
	}
	pid, err := Start(p, prog, a)
	statW.Close()
	outW.Close()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL); reapFailed(pid) })
	return child{pid: pid, status: statR, stdout: outR}
}

func pipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// records reads every record until the child closes its status end.
func (c child) records(t *testing.T) []Record {
	t.Helper()
	var out []Record
	for {
		r, err := ReadRecord(c.status)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
}

func (c child) wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(c.pid, &ws, 0, nil)
		if err == nil {
			return ws
		}
		if err != syscall.EINTR {
			t.Fatal(err)
		}
	}
}

// result reads the program's output, fails the test on a failed step and
// reaps the child.
func (c child) result(t *testing.T, p *Prog) (string, syscall.WaitStatus) {
	t.Helper()
	out, _ := io.ReadAll(c.stdout)
	for _, r := range c.records(t) {
		if err := r.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return string(out), c.wait(t)
}

func sh(script string) Program {
	return Program{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}}
}

func userPID(t *testing.T) uintptr {
	t.Helper()
	// An unprivileged user namespace (as root or not) makes the PID
	// namespace possible without privileges.
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		t.Skip("no user namespaces")
	}
	return syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
}

func TestStepsThenProgram(t *testing.T) {
	p := &Prog{}
	msg := "step\n"
	p.Call("write to stdout", syscall.SYS_WRITE, Val(1), Val(p.Str(msg)), Val(uintptr(len(msg))))
	c := start(t, p, sh("echo prog; exit 3"), 0, nil)
	out, _ := io.ReadAll(c.stdout)
	recs := c.records(t)
	ws := c.wait(t)
	if string(out) != "step\nprog\n" {
		t.Errorf("stdout %q, want the step's write, then the program's", out)
	}
	if len(recs) != 2 || recs[0].Kind != KindStarted || recs[0].A == 0 || recs[1].Kind != KindWaited {
		t.Fatalf("records %+v, want Started(pid), Waited", recs)
	}
	if got := syscall.WaitStatus(recs[1].A); got.ExitStatus() != 3 {
		t.Errorf("reported status %v, want exit 3", got)
	}
	if ws.ExitStatus() != 3 {
		t.Errorf("child exited %v, want 3 like its program", ws)
	}
}

func TestFailedStepIsNamedAndStopsTheChild(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	p := &Prog{}
	p.Tag(7)
	p.Call("mkdir "+dir+"/none/x", syscall.SYS_MKDIRAT, Int(unix.AT_FDCWD), Val(p.Str(dir+"/none/x")), Val(0o700))
	c := start(t, p, sh("touch "+marker), 0, nil)
	recs := c.records(t)
	ws := c.wait(t)
	if len(recs) != 1 || recs[0].Kind != KindFailed {
		t.Fatalf("records %+v, want one Failed", recs)
	}
	var se *StepError
	if err := recs[0].Err(); !errors.As(err, &se) || se.Step != 0 || se.Errno != syscall.ENOENT || se.Tag != 7 ||
		se.What != "mkdir "+dir+"/none/x" {
		t.Errorf("error %+v, want step 0 (the mkdir, tag 7) with ENOENT", se)
	}
	if ws.ExitStatus() != 125 {
		t.Errorf("child exited %v, want 125", ws)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the program ran after a failed step (%v)", err)
	}
}

func TestAllowedErrnoContinues(t *testing.T) {
	dir := t.TempDir()
	p := &Prog{}
	p.Call("mkdir "+dir, syscall.SYS_MKDIRAT, Int(unix.AT_FDCWD), Val(p.Str(dir)), Val(0o700))
	p.Allow(syscall.EEXIST)
	c := start(t, p, sh("exit 0"), 0, nil)
	if recs := c.records(t); len(recs) != 2 || recs[0].Kind != KindStarted {
		t.Fatalf("records %+v, want the program started despite EEXIST", recs)
	}
	c.wait(t)
}

// A saved result feeds later steps as an argument and as a value stored
// into a struct.
func TestSavedResultsFeedLaterSteps(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	p := &Prog{}
	fd := p.CallSave("open "+file, syscall.SYS_OPENAT, Int(unix.AT_FDCWD), Val(p.Str(file)),
		Val(syscall.O_WRONLY|syscall.O_CREAT|syscall.O_CLOEXEC), Val(0o600))
	p.Call("write "+file, syscall.SYS_WRITE, fd.Arg(), Val(p.Str("hello")), Val(5))
	buf, at := p.Bytes(4)
	p.Store32("store the descriptor", buf, 0, fd)
	p.Call("write the stored descriptor", syscall.SYS_WRITE, Val(1), Val(at), Val(4))
	c := start(t, p, sh("exit 0"), 0, nil)
	out, _ := io.ReadAll(c.stdout)
	c.records(t)
	c.wait(t)
	if b, err := os.ReadFile(file); err != nil || string(b) != "hello" {
		t.Errorf("file %q (%v), want hello written through the saved descriptor", b, err)
	}
	// Descriptors 0..3 are taken, so the open returned at least 4.
	if len(out) != 4 || binary.LittleEndian.Uint32(out) < 4 {
		t.Errorf("stored descriptor %v, want one 4-byte descriptor ≥ 4", out)
	}
}

func TestBadProgIsRefusedBeforeTheFork(t *testing.T) {
	p := &Prog{}
	p.Call("uses a slot nothing saved", syscall.SYS_CLOSE, Slot(3).Arg())
	if _, err := Start(p, sh("exit 0"), Attr{}); err == nil || !strings.Contains(err.Error(), "slot") {
		t.Errorf("Start: %v, want the bad slot refused", err)
	}
	q := &Prog{}
	q.Store32("store outside", make([]byte, 4), 0, 0)
	if _, err := Start(q, sh("exit 0"), Attr{}); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("Start: %v, want a store outside the program's memory refused", err)
	}
}

func TestExecFailureIsTheLastStep(t *testing.T) {
	p := &Prog{}
	c := start(t, p, Program{Path: "/nonexistent/prog", Args: []string{"prog"}}, 0, nil)
	recs := c.records(t)
	ws := c.wait(t)
	if len(recs) != 1 || recs[0].Kind != KindFailed || recs[0].A != uint32(p.Len()) || syscall.Errno(recs[0].B) != syscall.ENOENT ||
		recs[0].What != "/nonexistent/prog" || recs[0].Tag != 0 {
		t.Fatalf("records %+v, want only Failed(step %d = the exec of /nonexistent/prog, ENOENT, tag 0)", recs, p.Len())
	}
	if ws.ExitStatus() != 127 {
		t.Errorf("the child ended with %v, want exit status 127 (as the Go helper)", ws)
	}
}

// As the init of a PID namespace the child ends what the program leaves
// behind before it reports: once Waited arrives it has no child left.
// Without the namespace (not an init) the leftover is not the child's.
func TestInitEndsLeftoversBeforeItReports(t *testing.T) {
	flags := userPID(t)
	c := start(t, &Prog{}, sh("sleep 300 & echo $$"), flags, nil)
	recs := c.records(t)
	if len(recs) != 2 || recs[1].Kind != KindWaited {
		t.Fatalf("records %+v", recs)
	}
	// The status end closed, so the init is exiting or gone; it must have
	// no children at all (the sleep was reparented to it, then killed and
	// reaped).
	if kids, err := os.ReadFile("/proc/" + strconv.Itoa(c.pid) + "/task/" + strconv.Itoa(c.pid) + "/children"); err == nil && strings.TrimSpace(string(kids)) != "" {
		t.Errorf("init still has children %q after it reported", kids)
	}
	out, _ := io.ReadAll(c.stdout)
	if strings.TrimSpace(string(out)) != "2" {
		t.Errorf("program's PID %q, want 2 (the init is 1)", out)
	}
	c.wait(t)
}

// While the program runs, the init holds its status descriptor only: not
// the block's pipes, not anything the parent had open.
func TestInitHoldsOnlyItsStatus(t *testing.T) {
	flags := userPID(t)
	inR, inW := pipe(t)
	c := start(t, &Prog{}, sh("read x"), flags, inR)
	inR.Close()
	if r, err := ReadRecord(c.status); err != nil || r.Kind != KindStarted {
		t.Fatalf("first record %+v, %v", r, err)
	}
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(c.pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var fds []string
	for _, e := range ents {
		fds = append(fds, e.Name())
	}
	if len(fds) != 1 || fds[0] != "3" {
		t.Fatalf("init's descriptors %v, want only 3 (its status)", fds) // Fatal: a held pipe end would keep read from ever ending
	}
	inW.Close() // the program's read ends
	c.records(t)
	if ws := c.wait(t); ws.ExitStatus() != 1 {
		t.Errorf("child %v, want read's exit 1 at EOF", ws)
	}
}

// Start leaves no descriptor behind in the caller.
func TestStartLeaksNoDescriptor(t *testing.T) {
	flags := userPID(t)
	before := openFDs(t)
	for i := 0; i < 3; i++ {
		func() {
			statR, statW := pipe(t)
			null, _ := os.Open(os.DevNull)
			defer null.Close()
			pid, err := Start(&Prog{}, sh("exit 0"), Attr{Cloneflags: flags, Stdin: null, Stdout: null, Stderr: null, Status: statW,
				UIDMap: "0 " + strconv.Itoa(os.Getuid()) + " 1", GIDMap: "0 " + strconv.Itoa(os.Getgid()) + " 1"})
			if err != nil {
				t.Fatal(err)
			}
			statW.Close()
			io.Copy(io.Discard, statR)
			statR.Close()
			reapFailed(pid)
		}()
	}
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open after three starts, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// envSpawn makes the test binary start one child ("parent": with
// Attr.Parent) running `exit 7`, print its PID and exit, reaping it first
// unless it is its parent's. With envSpawnCgroup, a cgroup v2 directory,
// the child is born in it (clone3) and exits 7 only if it finds itself
// there.
const (
	envSpawn       = "RAWCHILD_SPAWN"
	envSpawnCgroup = "RAWCHILD_SPAWN_CGROUP"
)

func spawnAndExit(parent bool, cgroup string) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		os.Exit(2)
	}
	a := Attr{Parent: parent, Stdin: null, Stdout: null, Stderr: null, Status: null}
	prog := sh("exit 7")
	if cgroup != "" {
		fd, err := unix.Open(cgroup, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			os.Exit(2)
		}
		a.UseCgroupFD, a.CgroupFD = true, fd
		prog = sh("grep -q '/" + filepath.Base(cgroup) + "$' /proc/self/cgroup && exit 7; exit 3")
	}
	pid, err := Start(&Prog{}, prog, a)
	if err != nil {
		os.Stderr.WriteString(err.Error())
		os.Exit(2)
	}
	os.Stdout.WriteString(strconv.Itoa(pid))
	if !parent {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
	}
	os.Exit(0)
}

// With Parent the child is the caller's parent's: a process that starts
// one and exits leaves it to its own parent to reap, as the spawner leaves
// helpers to the server. Without, it is not the parent's to wait for.
func TestParentMakesTheChildTheCallersSibling(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, parent := range []bool{true, false} {
		mode := map[bool]string{true: "parent", false: "own"}[parent]
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), envSpawn+"="+mode)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		pid, err := strconv.Atoi(string(out))
		if err != nil {
			t.Fatalf("%s: output %q", mode, out)
		}
		var ws syscall.WaitStatus
		_, err = syscall.Wait4(pid, &ws, 0, nil)
		switch {
		case parent && (err != nil || ws.ExitStatus() != 7):
			t.Errorf("with Parent: wait4: %v, %v; want this process to reap it, exit 7", err, ws)
		case !parent && err != syscall.ECHILD:
			t.Errorf("without Parent: wait4: %v, want ECHILD (not this process's child)", err)
		}
	}
}

// A spawner's child (Parent) can be born in a cgroup v2 directory too:
// clone3 refuses CLONE_PARENT with an exit signal (EINVAL), the child gets
// its caller's. This is every raw helper's clone on a cgroup v2 host.
func TestParentWithCgroupFD(t *testing.T) {
	dir, _ := v2Dir(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envSpawn+"=parent", envSpawnCgroup+"="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("Start with Parent and UseCgroupFD: %v: %s", err, stderr.String())
	}
	pid, err := strconv.Atoi(string(out))
	if err != nil {
		t.Fatalf("output %q", out)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || ws.ExitStatus() != 7 {
		t.Errorf("wait4: %v, %v; want this process to reap it, exit 7 (born in %s, SIGCHLD to its parent)", err, ws, dir)
	}
}

// v2Dir makes an empty cgroup v2 directory below this process's own and
// returns it and its path relative to the hierarchy's root; it skips
// without root or a cgroup v2 mount.
func v2Dir(t *testing.T) (dir, rel string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a cgroup")
	}
	root := ""
	for _, m := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(m, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			root = m
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup v2 mount")
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(self), "\n") {
		if v, ok := strings.CutPrefix(l, "0::"); ok {
			rel = v
		}
	}
	dir = filepath.Join(root, rel, "codellm-rawchild-test-"+strconv.Itoa(os.Getpid())+"-"+t.Name())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	return dir, rel
}

// The child is born in the cgroup v2 directory it is given.
func TestCgroupFDPlacesTheChildAtBirth(t *testing.T) {
	dir, rel := v2Dir(t)
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	out, _ := startAttr(t, &Prog{}, sh("cat /proc/self/cgroup"), Attr{UseCgroupFD: true, CgroupFD: fd}).result(t, &Prog{})
	want := "0::" + filepath.Join(rel, filepath.Base(dir))
	if !strings.Contains(out, want+"\n") {
		t.Errorf("program's cgroups %q, want %s", out, want)
	}
}

// The program cannot end its init: signals from inside the namespace to
// an init without handlers are dropped (the runtime's handlers were reset
// in the child), so the init outlives them and reports. The same signal
// does end any other process of the namespace (the probe works).
func TestProgramCannotSignalItsInit(t *testing.T) {
	const script = "sleep 100 & kill -TERM $!; wait $!; echo other=$?; kill -TERM 1; kill -INT 1; kill -KILL 1; echo alive"
	c := start(t, &Prog{}, sh(script), userPID(t), nil)
	out, _ := io.ReadAll(c.stdout)
	recs := c.records(t)
	c.wait(t)
	if !strings.HasSuffix(string(out), "other=143\nalive\n") { // the shell may report "Terminated" first
		t.Errorf("program output %q, want the other process ended by SIGTERM (143) and the init alive", out)
	}
	if len(recs) != 2 || recs[1].Kind != KindWaited || syscall.WaitStatus(recs[1].A).ExitStatus() != 0 {
		t.Errorf("records %+v, want the init to report the program's exit 0", recs)
	}
}

// The init's status descriptor is close-on-exec: the program cannot write
// records of its own.
func TestProgramDoesNotInheritTheStatus(t *testing.T) {
	c := start(t, &Prog{}, sh("readlink /proc/self/fd/3 || echo none"), 0, nil)
	out, _ := io.ReadAll(c.stdout)
	c.records(t)
	c.wait(t)
	if !strings.HasSuffix(string(out), "none\n") {
		t.Errorf("the program's fd 3: %q, want none", out)
	}
}

// A child that never execs would keep its parent thread's name for life
// (the spawner's, which the spawner's client reaps by); Attr.Name renames
// it first.
func TestNameIsSet(t *testing.T) {
	for _, name := range []string{"", "codellm-t"} {
		p := &Prog{}
		got, _ := startAttr(t, p, sh("cat /proc/$PPID/comm"), Attr{Name: name}).result(t, p)
		self, err := os.ReadFile("/proc/thread-self/comm")
		if err != nil {
			t.Fatal(err)
		}
		want := name + "\n"
		if name == "" {
			want = string(self) // inherited from the forking thread
		}
		if got != want {
			t.Errorf("Name %q: the child is named %q, want %q", name, got, want)
		}
	}
}

// A NUL byte would end a C string early: refused before any fork. And
// checking leaves the caller's slices as they were (their spare capacity
// included, which an append for the check would have written).
func TestProgramWithNULIsRefused(t *testing.T) {
	args := make([]string, 2, 4)
	args[0], args[1] = "sh", "-c"
	spare := args[:4]
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	for _, prog := range []Program{{Path: "/bin/sh", Args: args, Env: []string{"A=1\x00B=2"}}, {Path: "/bin/sh\x00x", Args: args}} {
		if _, err := Start(&Prog{}, prog, Attr{Stdin: null, Stdout: null, Stderr: null, Status: null}); err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("Start(%q): %v, want the NUL byte refused", prog.Path, err)
		}
	}
	if spare[2] != "" || spare[3] != "" {
		t.Errorf("the check wrote into the caller's arguments: %q", spare)
	}
}

// A Direct program is the child itself once the steps have run: PID 1 of
// its own PID namespace (no init beside it), its status one Started byte and
// the exec's end of file; a failed exec is reported after that byte. Without
// Direct an init is PID 1 and the program is not.
func TestDirectProgramIsTheChild(t *testing.T) {
	flags := userPID(t)
	for _, direct := range []bool{false, true} {
		prog := sh("echo $$")
		prog.Direct = direct
		c := start(t, &Prog{}, prog, flags, nil)
		out, _ := io.ReadAll(c.stdout)
		status, _ := io.ReadAll(c.status)
		ws := c.wait(t)
		if got := strings.TrimSpace(string(out)) == "1"; got != direct || !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("direct %v: the program printed %q as its PID (%v)", direct, out, ws)
		}
		if direct && string(status) != string([]byte{KindStarted}) {
			t.Errorf("direct: status %q, want the Started byte alone", status)
		}
	}
	prog := Program{Path: "/nonexistent-codellm", Args: []string{"x"}, Direct: true}
	c := start(t, &Prog{}, prog, flags, nil)
	status, _ := io.ReadAll(c.status)
	c.wait(t)
	if len(status) < 2 || status[0] != KindStarted {
		t.Fatalf("failed direct exec: status %q", status)
	}
	rec, err := ReadRecord(bytes.NewReader(status[1:]))
	if err != nil || rec.Err() == nil || rec.Err().Errno != syscall.ENOENT {
		t.Errorf("failed direct exec: record %+v (%v), want ENOENT", rec, err)
	}
}
