//go:build linux

package landlock

import "golang.org/x/sys/unix"

func llsysClose(fd int) { _ = unix.Close(fd) }
