//go:build !linux

package seccomp

// Supported reports whether the kernel accepts seccomp filters.
func Supported() bool { return false }

// Install always fails outside Linux.
func Install() error { return ErrUnsupported }
