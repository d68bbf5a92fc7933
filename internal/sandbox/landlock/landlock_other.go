//go:build !linux

package landlock

// ABI is 0 outside Linux.
func ABI() int { return 0 }

// Restrict always fails outside Linux.
func Restrict(p Policy) (int, error) { return 0, ErrUnsupported }
