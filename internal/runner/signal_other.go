//go:build !unix

package runner

import (
	"strconv"
	"syscall"
)

func signalName(sig syscall.Signal) string { return "SIG" + strconv.Itoa(int(sig)) }
