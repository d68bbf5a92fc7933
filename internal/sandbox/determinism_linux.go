//go:build linux

package sandbox

import "github.com/codellm/codellm/internal/sandbox/hook"

// MechDeterminism names deterministic mode in an *UnavailableError.
const MechDeterminism = "determinism"

// determinismPlan checks that the mechanisms in use can honour d fully and
// puts it in the helper's spec: the key for the helper's part (see
// hook.Spec.Determ), the environment for libfaketime and python.
func determinismPlan(hs *hook.Spec, d *Determinism, use mechSet) error {
	if missing := determinismMissing(use); missing != "" {
		return &UnavailableError{Mechanism: MechDeterminism, Reason: "deterministic mode needs " + missing,
			Fix: "run natively on Linux with user, PID, mount and time namespaces, seccomp and libfaketime, or turn deterministic mode off"}
	}
	if !hs.Init {
		return &UnavailableError{Mechanism: MechDeterminism, Reason: "deterministic mode needs the sandbox's init (it pins the program's PID and feeds /dev/urandom); Config.ProgramAsPID1 has none",
			Fix: "turn ProgramAsPID1 or deterministic mode off"}
	}
	hs.Determ = d.Key()
	hs.FakeTimeRC = d.FakeTimeRC()
	hs.Env = d.Environ(hs.Env)
	return nil
}

// determinismMissing names the first piece of deterministic mode that the
// mechanisms in use (or the host) lack, "" when none.
func determinismMissing(use mechSet) string {
	for _, m := range []struct {
		bit  mechSet
		name string
	}{{mUserNS, "a user namespace (CAP_SYS_TIME for the time namespace)"}, {mPIDNS, "a PID namespace"},
		{mRootFS, "the private root filesystem (seeded /dev/urandom)"}, {mUTSNS, "a UTS namespace (fixed hostname)"},
		{mSeccomp, "seccomp (getrandom → ENOSYS)"}} {
		if !use.has(m.bit) {
			return m.name
		}
	}
	return determinismHost()
}

// determinismStatus is the report's row for the mechanisms in use.
func determinismStatus(use mechSet) DeterminismStatus {
	if missing := determinismMissing(use); missing != "" {
		return DeterminismStatus{Missing: missing, NotCovered: DeterminismNotCovered}
	}
	return DeterminismStatus{Supported: true, NotCovered: DeterminismNotCovered, Mechanisms: []string{
		"wall clock: libfaketime " + fakeTimeLib() + " and /etc/faketimerc (dynamically linked programs, bash's own clock)",
		"monotonic/boot clocks: time namespace from zero",
		"randomness: libfaketime FAKERANDOM_SEED (libc getrandom/getentropy); getrandom syscall ENOSYS; /dev/urandom, /dev/random one seeded ChaCha20 stream (a FIFO fed by the init)",
		"addresses: personality(ADDR_NO_RANDOMIZE)",
		"hostname, users, umask, TZ, locale, environment order: fixed",
	}}
}
