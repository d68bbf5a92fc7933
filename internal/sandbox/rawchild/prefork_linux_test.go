//go:build linux && (amd64 || arm64)

package rawchild

import (
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// preforkAttr is a user and PID namespace with the test's maps.
func preforkAttr(t *testing.T) Attr {
	return Attr{Cloneflags: userPID(t), Pdeathsig: syscall.SIGKILL,
		UIDMap: "0 " + strconv.Itoa(os.Getuid()) + " 1", GIDMap: "0 " + strconv.Itoa(os.Getgid()) + " 1"}
}

// warm lays out p's frame as a Start would have: Prefork needs a Prog built once.
func warm(t *testing.T, p *Prog) {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if _, err := newFrame(p, sh("exit 1"), []FD{null, null, null, null}, 0, ""); err != nil {
		t.Fatal(err)
	}
}

// preforked is a Prog built once and a child forked for its next program;
// the Prog is reset for that program.
func preforked(t *testing.T) (*Prog, *Idle) {
	t.Helper()
	p := &Prog{}
	p.Call("a first program", syscall.SYS_GETPID)
	warm(t, p)
	idle, err := Prefork(p, preforkAttr(t))
	if err != nil {
		t.Fatal(err)
	}
	p.Reset()
	return p, idle
}

// A child forked before its program was built runs that program, with the
// descriptors it was handed, as a child from Start would: the steps' write,
// the program's output, the init's records.
func TestPreforkedChildRunsALaterProgram(t *testing.T) {
	p, idle := preforked(t)
	t.Cleanup(func() { reapFailed(idle.PID) })
	msg := "from the step\n"
	p.Call("write", syscall.SYS_WRITE, Val(1), Val(p.Str(msg)), Val(uintptr(len(msg))))
	statR, statW := pipe(t)
	outR, outW := pipe(t)
	inR, inW := pipe(t)
	if err := idle.Run(p, sh("echo from the program; read x; exit 0"), "codellm-t", []FD{inR, outW, outW, statW}); err != nil {
		t.Fatal(err)
	}
	statW.Close()
	outW.Close()
	inR.Close()
	line := make([]byte, 64)
	n, _ := io.ReadAtLeast(outR, line, len("from the step\nfrom the program\n"))
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(idle.PID) + "/comm")
	inW.Close()
	rest, _ := io.ReadAll(outR)
	out := string(line[:n]) + string(rest)
	c := child{pid: idle.PID, status: statR}
	recs := c.records(t)
	ws := c.wait(t)
	if want := "from the step\nfrom the program\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if string(comm) != "codellm-t\n" {
		t.Errorf("the child is named %q once it runs, want codellm-t", comm)
	}
	if len(recs) != 2 || recs[0].Kind != KindStarted || recs[1].Kind != KindWaited || ws.ExitStatus() != 0 {
		t.Errorf("records %+v, exit %v: want Started, Waited and 0", recs, ws)
	}
}

// An idle child that is given up ends (the caller reaps it), and a Prog
// whose memory moved since the fork is refused before anything is sent.
func TestPreforkedChildCloseAndStale(t *testing.T) {
	p, idle := preforked(t)
	for range 2 * cap(p.ops) { // outgrows the ops array the child has
		p.Call("getpid", syscall.SYS_GETPID)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if err := idle.Run(p, sh("exit 0"), "", []FD{null, null, null, null}); err != ErrStale {
		t.Errorf("Run with moved memory: %v, want ErrStale", err)
	}
	idle.Close()
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(idle.PID, &ws, 0, nil); err != nil || !ws.Signaled() {
		t.Errorf("the closed idle child: %v %v, want it killed", ws, err)
	}
}

// An idle child makes its IdleUnshare namespaces while it waits: before its
// program arrives its network and UTS namespaces are no longer the caller's
// (without IdleUnshare they are), and its program runs in them.
func TestPreforkedChildUnsharesWhileIdle(t *testing.T) {
	ours, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skip(err)
	}
	for _, unshare := range []uintptr{0, syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS} {
		p := &Prog{}
		p.Call("a first program", syscall.SYS_GETPID)
		warm(t, p)
		a := preforkAttr(t)
		a.IdleUnshare = unshare
		idle, err := Prefork(p, a)
		if err != nil {
			t.Fatal(err)
		}
		var idleNet string
		for range 200 { // until it has unshared (or, without, at once)
			if idleNet, _ = os.Readlink("/proc/" + strconv.Itoa(idle.PID) + "/ns/net"); idleNet != ours || unshare == 0 {
				break
			}
			syscall.Nanosleep(&syscall.Timespec{Nsec: 5e6}, nil)
		}
		p.Reset()
		p.Call("getpid", syscall.SYS_GETPID)
		statR, statW := pipe(t)
		outR, outW := pipe(t)
		null, _ := os.Open(os.DevNull)
		if err := idle.Run(p, sh("readlink /proc/self/ns/net"), "", []FD{null, outW, outW, statW}); err != nil {
			t.Fatal(err)
		}
		null.Close()
		statW.Close()
		outW.Close()
		out, _ := io.ReadAll(outR)
		c := child{pid: idle.PID, status: statR}
		c.records(t)
		c.wait(t)
		if moved := idleNet != ours; moved != (unshare != 0) || string(out) != idleNet+"\n" {
			t.Errorf("IdleUnshare %#x: the idle child's network namespace %s (ours %s), its program's %q", unshare, idleNet, ours, out)
		}
	}
}
