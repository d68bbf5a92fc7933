//go:build unix

package workspace

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// signalName is the §9.8 signal name ("SIGKILL"), or "" for a number the system does not name.
func signalName(s syscall.Signal) string {
	return unix.SignalName(s)
}
