//go:build linux

package sandbox

import (
	"errors"
	"syscall"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
)

// startError explains a failed clone/exec of the helper itself. A refused
// user namespace, a refused namespace inside one, a refused clone into the
// block's cgroup (clone3 CLONE_INTO_CGROUP) and a container's seccomp
// profile all answer EPERM, EINVAL, ENOSPC or EUSERS, so the errno does not
// say which. The clone's parts are therefore tried again one at a time — a
// bare user namespace, then each other namespace inside one — and the first
// that fails is blamed, with the fix for its own cause; when each works
// alone and the helper was to be born in a cgroup, the placement is. The
// user namespace's sysctl fix is printed only when a bare user namespace
// cannot be made. This runs only on the error path.
func startError(use mechSet, intoCgroup bool, err error) error {
	if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EUSERS) {
		return &UnavailableError{Mechanism: MechHelper, Reason: "start helper: " + err.Error(), Fix: mechFix(mHelper)}
	}
	var base uintptr
	if use.has(mUserNS) {
		if uerr := cloneErr(syscall.CLONE_NEWUSER); uerr != nil {
			return &UnavailableError{Mechanism: MechUserNS, Reason: "cannot create a user namespace: " + uerr.Error(), Fix: userNSFix(uerr)}
		}
		base = syscall.CLONE_NEWUSER
	}
	for _, ns := range cloneNamespaces {
		if !use.has(ns.bit) {
			continue
		}
		if nerr := cloneErr(base | ns.flag); nerr != nil {
			fix := mechFix(ns.bit)
			if errors.Is(nerr, syscall.EPERM) {
				fix = "a seccomp profile or security module refuses the clone (containers: allow clone/unshare with namespace flags, docs/operator.md §4.2)"
			}
			return &UnavailableError{Mechanism: mechName(ns.bit), Reason: "cannot create namespaces: " + nerr.Error(), Fix: fix}
		}
	}
	if intoCgroup {
		return &UnavailableError{Mechanism: MechCgroup, Reason: "clone into the block's cgroup (clone3 CLONE_INTO_CGROUP): " + err.Error(), Fix: mechFix(mCgroup)}
	}
	return &UnavailableError{Mechanism: MechHelper, Reason: "start helper: " + err.Error() + " (each namespace can be made on its own)", Fix: mechFix(mHelper)}
}

// cloneNamespaces are the namespaces a helper's clone makes besides the
// user namespace, in the order startError tries them.
var cloneNamespaces = []struct {
	bit  mechSet
	flag uintptr
}{{mPIDNS, syscall.CLONE_NEWPID}, {mMountNS, syscall.CLONE_NEWNS}, {mNetNS, syscall.CLONE_NEWNET},
	{mIPCNS, syscall.CLONE_NEWIPC}, {mUTSNS, syscall.CLONE_NEWUTS}}

// cloneErr is the error of a clone with flags, nil when it succeeds: the
// child execs "/" (EACCES before anything runs; package syscall reaps it),
// and a refused clone comes back as the clone's own errno.
var cloneErr = func(flags uintptr) error {
	_, err := syscall.ForkExec("/", []string{"/"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{Cloneflags: flags}})
	if err == nil || errors.Is(err, syscall.EACCES) {
		return nil
	}
	return err
}

// userNSFix is the fix for a user namespace that cannot be made, by what
// refuses it: the count limit, Debian's and Ubuntu's switches, or (EPERM
// with none of those) a seccomp profile or security module.
func userNSFix(err error) string {
	switch {
	case sysctlIs("/proc/sys/user/max_user_namespaces", "0") || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS):
		return "raise the user namespace limit: sysctl user.max_user_namespaces=15000"
	case sysctlIs("/proc/sys/kernel/unprivileged_userns_clone", "0"):
		return "allow unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1"
	case sysctlIs("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"):
		return "AppArmor restricts unprivileged user namespaces: sysctl kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for codellm that allows userns"
	}
	return "a seccomp profile or security module refuses clone/unshare with CLONE_NEWUSER (containers: a seccomp profile that allows it, docs/operator.md §4.2)"
}

// bornInto reports whether a helper for child is born in it (cgroup v2).
func bornInto(child *cgroup.Group) bool {
	if child == nil {
		return false
	}
	_, ok := child.FD()
	return ok
}
