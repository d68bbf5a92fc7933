//go:build linux

package rawchild

// threadPointer is TPIDR_EL0 (vfork_linux_arm64.s).
func threadPointer() uintptr
