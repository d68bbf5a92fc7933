//go:build !unix

package pipeline

import (
	"strconv"
	"syscall"
)

// signalName: platforms without POSIX signal names report the number.
func signalName(s syscall.Signal) string { return "signal " + strconv.Itoa(int(s)) }
