//go:build linux

package landlock

import llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

// ABI returns the Landlock ABI version of the running kernel, 0 if
// Landlock is unavailable (not built in, or not enabled by lsm=).
func ABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}
