//go:build unix

package workspace

import (
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalName is the §9.8 signal name ("SIGKILL"); signals the system does not name (real-time ones) become
// "SIG<number>", which still matches ^SIG[A-Z0-9]+$.
func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}
