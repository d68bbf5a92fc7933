package testhelp

import (
	"os/exec"
	"testing"
	"time"
)

// startWaited starts argv and returns it with the channel its Wait goroutine closes.
func startWaited(t *testing.T, argv ...string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	return cmd, done
}

// A process that honours SIGTERM ends with it; one that ignores it is SIGKILLed after the grace, and both
// are reaped when StopGracefully returns.
func TestStopGracefully(t *testing.T) {
	cmd, done := startWaited(t, "sleep", "60")
	if !StopGracefully(cmd.Process, done, time.Minute) {
		t.Fatal("sleep needed SIGKILL")
	}
	if st := cmd.ProcessState; st == nil || st.String() != "signal: terminated" {
		t.Fatalf("sleep ended %v, want by SIGTERM", st)
	}
	// An ignored signal stays ignored across exec: this sleep survives the SIGTERM.
	cmd, done = startWaited(t, "sh", "-c", `trap "" TERM; exec sleep 60`)
	time.Sleep(100 * time.Millisecond) // let sh install the trap (if not, SIGTERM ends it: the check below says so)
	if StopGracefully(cmd.Process, done, 300*time.Millisecond) {
		t.Fatalf("a process ignoring SIGTERM ended without SIGKILL (%v)", cmd.ProcessState)
	}
	if st := cmd.ProcessState; st == nil || st.String() != "signal: killed" {
		t.Fatalf("ended %v, want by SIGKILL", st)
	}
	if !StopGracefully(cmd.Process, done, time.Minute) {
		t.Fatal("an exited process is only reaped")
	}
}
