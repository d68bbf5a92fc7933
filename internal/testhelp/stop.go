package testhelp

import (
	"os"
	"syscall"
	"time"
)

// StopGracefully stops a test's server process the way an operator does: SIGTERM, then, if it has not
// exited within grace, SIGKILL. exited is the channel the test's cmd.Wait goroutine sends (or closes) on;
// StopGracefully receives from it once, so the process is reaped when it returns. It reports whether the
// process ended without SIGKILL (one that had already exited is only reaped).
//
// Why SIGTERM first: a server stopped that way removes its own work dir and unmounts its workspace
// tmpfs, which exercises that path in every end-to-end test; SIGKILL leaves them behind (RemoveWorkDir
// cleans up either way). The bound is a hang detector for the cleanup, not a timed assertion.
func StopGracefully[T any](p *os.Process, exited <-chan T, grace time.Duration) bool {
	select {
	case <-exited:
		return true
	default:
	}
	_ = p.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
		return true
	case <-timer.C:
		_ = p.Kill()
		<-exited
		return false
	}
}
