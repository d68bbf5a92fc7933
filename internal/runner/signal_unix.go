//go:build unix

package runner

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalName renders a signal the way Piston does ("SIGKILL").
func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(sig))
}
