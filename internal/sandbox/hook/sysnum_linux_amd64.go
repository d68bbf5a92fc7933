//go:build linux

package hook

import "syscall"

const (
	sysFstatat = syscall.SYS_NEWFSTATAT
	sysSeccomp = 317
)
