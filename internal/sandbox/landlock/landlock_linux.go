//go:build linux

package landlock

import (
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// MaxABI is the newest Landlock ABI this package asks for. Newer kernels
// are used at this level; older ones are downgraded (best effort) and the
// achieved level is reported by ABI.
const MaxABI = 7

// ABI returns the Landlock ABI version of the running kernel, 0 if
// Landlock is unavailable (not built in, or not enabled by lsm=).
func ABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// Restrict enforces p on the calling thread; it is inherited across execve.
// The caller must hold runtime.LockOSThread until it execs, and must have
// set no_new_privs (or hold CAP_SYS_ADMIN in its user namespace). It
// returns the ABI level enforced.
func Restrict(p Policy) (int, error) {
	abi := ABI()
	if abi == 0 {
		return 0, ErrUnsupported
	}
	if abi > MaxABI {
		abi = MaxABI
	}
	base := ll.V7
	cfg := ll.Config{HandledAccessFS: base.HandledAccessFS}
	if p.DenyTCP {
		cfg.HandledAccessNet = base.HandledAccessNet
	}
	if p.Scope {
		cfg.Scoped = base.Scoped
	}
	cfg = cfg.BestEffort()

	var rules []ll.Rule
	if len(p.ReadExec) > 0 {
		rules = append(rules, ll.RODirs(p.ReadExec...).IgnoreIfMissing())
	}
	if len(p.ReadOnly) > 0 {
		rules = append(rules, ll.PathAccess(llsys.AccessFSReadFile|llsys.AccessFSReadDir, p.ReadOnly...).IgnoreIfMissing())
	}
	if len(p.ReadWrite) > 0 {
		rules = append(rules, ll.RWDirs(p.ReadWrite...).WithRefer())
	}
	if len(p.RWFiles) > 0 {
		rules = append(rules, ll.RWFiles(p.RWFiles...).IgnoreIfMissing())
	}
	if p.ListRoot {
		rules = append(rules, ll.PathAccess(llsys.AccessFSReadDir, "/"))
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return 0, fmt.Errorf("landlock: build ruleset: %w", err)
	}
	if fd < 0 {
		return 0, ErrUnsupported
	}
	defer llsysClose(fd)
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return 0, fmt.Errorf("landlock: restrict self: %w", err)
	}
	return abi, nil
}
