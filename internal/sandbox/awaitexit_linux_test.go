package sandbox

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// awaitExit waits for the child to exit without reaping it: it has not
// returned while the child runs, returns once it exited, and the child is
// then a zombie that Wait reaps with its real status.
func TestAwaitExitWaitsWithoutReaping(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "read x; exit 3"}, &os.ProcAttr{Files: []*os.File{pr, nil, nil}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { awaitExit(p.Pid); close(done) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("awaitExit returned while the process was still running")
	default:
	}
	pw.Close() // EOF: the shell exits 3
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("awaitExit did not return after the process exited")
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || info.Signo == 0 {
		t.Fatalf("process not waitable after awaitExit: %v %+v", err, info)
	}
	st, err := p.Wait()
	if err != nil || st.ExitCode() != 3 {
		t.Fatalf("Wait after awaitExit: %v %v", st, err)
	}
}
