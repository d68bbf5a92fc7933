//go:build !linux

package seccomp

// Supported reports whether the kernel accepts seccomp filters.
func Supported() bool { return false }
