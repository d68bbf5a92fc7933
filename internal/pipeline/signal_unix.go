//go:build unix

package pipeline

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalName gives the conventional name ("SIGSEGV") the contract reports, or "signal N" for a number the
// platform has no name for.
func signalName(s syscall.Signal) string {
	if name := unix.SignalName(s); name != "" {
		return name
	}
	return "signal " + strconv.Itoa(int(s))
}
