//go:build linux

package hook

// Syscalls newer than package syscall's tables; numbers from 424 on are
// shared by every architecture.
const (
	sysOpenTree              = 428
	sysMoveMount             = 429
	sysCloseRange            = 436
	sysMountSetattr          = 442
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446
)
