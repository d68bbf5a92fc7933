//go:build !linux

package landlock

// ABI is 0 outside Linux.
func ABI() int { return 0 }
