//go:build linux

package hook

import "syscall"

const (
	sysFstatat = syscall.SYS_FSTATAT
	sysSeccomp = 277
)
