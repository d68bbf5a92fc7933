//go:build linux && (amd64 || arm64)

package rawchild

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dieWithin is the hang detector of the parent-death tests: a child the
// signal reaches is gone in milliseconds.
const dieWithin = 15 * time.Second

// asBlockUID is a Prog that takes uid and gid 0 of a user namespace whose
// maps put them on a host id other than the caller's: the raw helper's
// setresuid as a root server runs it (after the steps before adds), which makes the kernel clear the
// parent-death signal.
func asBlockUID(t *testing.T, before func(p *Prog)) (*Prog, Attr) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root: only a root caller's child changes its host ids by taking the block's")
	}
	p := &Prog{}
	before(p)
	p.Call("setresgid", syscall.SYS_SETRESGID, Val(0), Val(0), Val(0))
	p.Call("setresuid", syscall.SYS_SETRESUID, Val(0), Val(0), Val(0))
	return p, Attr{Cloneflags: userPID(t), UIDMap: "0 65534 1", GIDMap: "0 65534 1"}
}

// A child whose steps change its ids still dies with the thread that
// started it (issue 35 item 1: a SIGKILLed server left every block the raw
// helper started running), started at once or pre-forked. The thread
// starts the child, waits until its program runs (its steps are done) and
// exits, as a killed server's do. On the code before the re-arm the child
// lives on.
func TestPdeathsigSurvivesTheIDChange(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(p *Prog, a Attr) (int, error)
	}{
		{"started", func(p *Prog, a Attr) (int, error) { return Start(p, sh("exec sleep 600"), a) }},
		{"pre-forked", func(p *Prog, a Attr) (int, error) {
			idle, err := Prefork(p, a)
			if err != nil {
				return 0, err
			}
			return idle.PID, idle.Run(p, sh("exec sleep 600"), "", []FD{a.Stdin, a.Stdout, a.Stderr, a.Status})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, a := asBlockUID(t, func(*Prog) {})
			warm(t, p)
			ws, ok := startOnExitingThread(t, p, a, c.start)
			if !ok {
				t.Fatalf("the child outlived the thread that started it by %v: its parent-death signal was cleared by setresuid", dieWithin)
			}
			if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("the child ended with %v, want SIGKILL", ws)
			}
		})
	}
}

// startOnExitingThread starts a child with start on a thread that ends
// once the child's program runs, and waits (dieWithin) for the child to end.
func startOnExitingThread(t *testing.T, p *Prog, a Attr, start func(*Prog, Attr) (int, error)) (syscall.WaitStatus, bool) {
	t.Helper()
	type started struct {
		pid int
		err error
	}
	done := make(chan started, 1)
	statR, statW := pipe(t)
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	a.Stdin, a.Stdout, a.Stderr, a.Status, a.Pdeathsig = null, null, null, statW, syscall.SIGKILL
	onExitingThread(func() {
		pid, err := start(p, a)
		if err == nil {
			var r Record
			if r, err = ReadRecord(statR); err == nil && r.Kind != KindStarted {
				err = r.Err()
			}
		}
		done <- started{pid, err}
	})
	s := <-done
	statW.Close()
	if s.pid > 0 {
		t.Cleanup(func() { _ = syscall.Kill(s.pid, syscall.SIGKILL); reapFailed(s.pid) })
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	return waitWithin(t, s.pid, dieWithin)
}

// A child whose caller died between its fork and the re-arm (the signal
// went to nobody) ends itself instead of running the program: its status
// descriptor has no reader left. The first step holds the child until the
// reader is closed; without the check the program runs and exits 0.
func TestChildWhoseReaderDiedBeforeTheRearmEnds(t *testing.T) {
	p, a := asBlockUID(t, func(p *Prog) {
		_, one := p.Bytes(1)
		p.Call("wait for the gate", syscall.SYS_READ, Val(4), Val(one), Val(1))
		p.Expect(1)
	})
	gateR, gateW := pipe(t)
	a.Extra = []FD{gateR}
	c := startAttr(t, p, sh("exit 0"), a)
	gateR.Close()
	c.status.Close() // the only reader: as if the server were gone
	if _, err := gateW.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	ws, ok := waitWithin(t, c.pid, dieWithin)
	if !ok {
		t.Fatal("the child did not end")
	}
	if ws.Exited() && ws.ExitStatus() == 0 {
		t.Fatal("the child ran its program although nobody reads its status and its parent-death signal had been cleared")
	}
	if !ws.Exited() || ws.ExitStatus() != 125 {
		t.Errorf("the child ended with %v, want exit 125", ws)
	}
}

// onExitingThread runs f on a thread of its own that ends when f returns
// (a goroutine that returns locked ends its thread), never the main thread
// (which the runtime keeps: f then runs on another while it waits).
func onExitingThread(f func()) {
	go func() {
		runtime.LockOSThread() // never unlocked but on the main thread
		if syscall.Gettid() == os.Getpid() {
			done := make(chan struct{})
			onExitingThread(func() { f(); close(done) })
			<-done
			runtime.UnlockOSThread()
			return
		}
		f()
	}()
}

// waitWithin reaps pid, waiting at most d for it to end.
func waitWithin(t *testing.T, pid int, d time.Duration) (syscall.WaitStatus, bool) {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	pfd := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(d); ; {
		n, err := unix.Poll(pfd, int(time.Until(deadline).Milliseconds())+1)
		if err == nil && n == 1 {
			break
		}
		if err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			return 0, false
		}
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			return ws, err == nil
		}
	}
}
