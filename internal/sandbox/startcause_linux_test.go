package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// A failed helper clone is blamed on what really refuses it: the user
// namespace (with the sysctl fix) only when a bare one cannot be made.
// cgroup v2 hosts answered EINVAL for the clone into the block's cgroup,
// and were told to raise user.max_user_namespaces.
func TestStartErrorBlamesTheRealCause(t *testing.T) {
	all := mUserNS | mPIDNS | mMountNS | mNetNS | mIPCNS | mUTSNS
	cases := []struct {
		name       string
		refuse     func(flags uintptr) error
		intoCgroup bool
		mech, fix  string
		notFix     string
	}{
		{"placement", func(uintptr) error { return nil }, true, MechCgroup, "Delegate=yes", "max_user_namespaces"},
		{"userns limit", refuseWith(syscall.CLONE_NEWUSER, syscall.ENOSPC), true, MechUserNS, "user.max_user_namespaces", ""},
		{"userns by seccomp", refuseWith(syscall.CLONE_NEWUSER, syscall.EPERM), false, MechUserNS, "seccomp", "max_user_namespaces"},
		{"netns", refuseWith(syscall.CLONE_NEWNET, syscall.EPERM), true, MechNetNS, "seccomp", "max_user_namespaces"},
		{"nothing alone", func(uintptr) error { return nil }, false, MechHelper, "", "max_user_namespaces"},
	}
	real := cloneErr
	t.Cleanup(func() { cloneErr = real })
	for _, c := range cases {
		cloneErr = c.refuse
		err := startError(all, c.intoCgroup, &os.PathError{Op: "fork/exec", Path: "helper", Err: syscall.EINVAL})
		var ue *UnavailableError
		if !errors.As(err, &ue) || ue.Mechanism != c.mech || !strings.Contains(ue.Fix, c.fix) ||
			c.notFix != "" && strings.Contains(ue.Fix+ue.Reason, c.notFix) {
			t.Errorf("%s: %v; want mechanism %s, a fix naming %q and not %q", c.name, err, c.mech, c.fix, c.notFix)
		}
	}
}

// refuseWith makes a stand-in for cloneErr that refuses every clone with
// flag set.
func refuseWith(flag uintptr, errno syscall.Errno) func(uintptr) error {
	return func(flags uintptr) error {
		if flags&flag != 0 {
			return errno
		}
		return nil
	}
}

// cloneErr itself: a user namespace can be made on this host, and a clone
// the kernel refuses comes back as its errno.
func TestCloneErrProbes(t *testing.T) {
	if err := cloneErr(syscall.CLONE_NEWUSER); err != nil && !requireSandbox() {
		t.Skipf("no user namespaces here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if err := cloneErr(syscall.CLONE_NEWPID | syscall.CLONE_THREAD); err == nil {
		t.Error("clone with CLONE_THREAD without CLONE_VM succeeded; want EINVAL")
	}
}

// envSeccomp makes the test binary, run for TestDoctorNamesSeccompNotTheSysctl
// alone, install a seccomp filter that refuses one facility as a container
// runtime's profile or an old kernel does — "userns": clone with
// CLONE_NEWUSER (EPERM; clone3 ENOSYS, so nothing goes around it),
// "close_range": close_range (EPERM) — then open a sandbox in the mode after
// the colon, print its Report and, if it is ready, the outcome of one
// block, as "@@report" and "@@block" JSON lines.
const envSeccomp = "CODELLM_TEST_SECCOMP"

func underSeccomp(t *testing.T, what string, mode Mode) {
	var filter []bpf.Instruction
	switch what {
	case "userns":
		filter = []bpf.Instruction{
			bpf.LoadAbsolute{Off: 0, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE3, SkipTrue: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE, SkipTrue: 2},
			bpf.LoadAbsolute{Off: 16, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_NEWUSER, SkipTrue: 2},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		}
	case "close_range":
		filter = []bpf.Instruction{
			bpf.LoadAbsolute{Off: 0, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLOSE_RANGE, SkipTrue: 1},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		}
	default:
		t.Fatalf("%s=%s:%s: unknown facility", envSeccomp, what, mode)
	}
	prog, err := bpf.Assemble(filter)
	if err == nil {
		err = installFilter(prog)
	}
	if err != nil {
		t.Fatalf("seccomp: %v", err)
	}
	s, err := New(Config{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, _ := json.Marshal(s.Report())
	fmt.Printf("\n@@report %s\n", rep)
	if s.Report().Ready {
		o, err := runIn(t, s, "", nil, "/bin/sh", "-c", "echo ran")
		b, _ := json.Marshal(struct {
			Exit        int
			Stdout, Err string
		}{o.ExitCode, o.Stdout, fmt.Sprint(err)})
		fmt.Printf("\n@@block %s\n", b)
	}
}

// installFilter installs prog on every thread of this process.
func installFilter(prog []bpf.RawInstruction) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return e
	}
	return nil
}

// seccompReport runs the test binary under a seccomp filter that refuses
// what (see envSeccomp) and returns its sandbox's Report in mode, and the
// block's outcome line when it ran one.
func seccompReport(t *testing.T, what string, mode Mode) (Report, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestDoctorNamesSeccompNotTheSysctl$", "-test.count=1")
	cmd.Env = append(os.Environ(), envSeccomp+"="+what+":"+string(mode))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var rep Report
	var block string
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "@@report "); ok {
			if err := json.Unmarshal([]byte(v), &rep); err != nil {
				t.Fatalf("%v: %s", err, v)
			}
		}
		if v, ok := strings.CutPrefix(l, "@@block "); ok {
			block = v
		}
	}
	if rep.Mode == "" {
		t.Fatalf("no report: %s", out)
	}
	return rep, block
}

// doctor's message when a seccomp profile refuses user namespaces names
// the user namespace and the profile, never the sysctl that is not the
// cause.
func TestDoctorNamesSeccompNotTheSysctl(t *testing.T) {
	if v := os.Getenv(envSeccomp); v != "" {
		what, mode, _ := strings.Cut(v, ":")
		underSeccomp(t, what, Mode(mode))
		return
	}
	rep, _ := seccompReport(t, "userns", ModeNative)
	if rep.Ready {
		t.Error("native is ready without user namespaces")
	}
	for _, m := range rep.Mechanisms {
		if m.Name == MechUserNS {
			if m.Available || !strings.Contains(m.Detail, "seccomp") || strings.Contains(m.Detail, "max_user_namespaces") {
				t.Errorf("userns: available %v, detail %q; want refused, naming seccomp and not the sysctl", m.Available, m.Detail)
			}
			return
		}
	}
	t.Fatal("no userns row")
}

// besteffort without a user namespace says so in the report (doctor,
// /readyz; serve logs it as an error), with the cause.
func TestBesteffortSaysItHasNoUserNS(t *testing.T) {
	rep, _ := seccompReport(t, "userns", ModeBestEffort)
	for _, w := range rep.Warnings {
		if strings.HasPrefix(w, WarnWithoutUserNS) && strings.Contains(w, "seccomp") {
			return
		}
	}
	t.Errorf("warnings %q: want %q with its cause", rep.Warnings, WarnWithoutUserNS)
}

// A kernel or seccomp profile without close_range: the raw helper, which
// needs it to place a block's descriptors, is off and blocks get the Go
// helper, and doctor says so. Before the probe every raw block died with
// exit 125 and a misleading hint about the executable's path.
func TestMissingCloseRangeFallsBackToTheGoHelper(t *testing.T) {
	rep, block := seccompReport(t, "close_range", ModeNative)
	f := feature(t, rep, featCloseRange)
	if f.Available || !strings.Contains(f.Detail, "EPERM") || !strings.Contains(f.Detail, "Go helper") {
		t.Errorf("close_range line %+v: want missing, naming EPERM and the Go helper", f)
	}
	if !rep.Ready || !strings.Contains(block, `"Exit":0`) || !strings.Contains(block, `ran\n`) {
		t.Errorf("ready %v, block %s: want a block that runs on the Go helper", rep.Ready, block)
	}
}

func feature(t *testing.T, rep Report, name string) FeatureStatus {
	t.Helper()
	for _, f := range rep.Features {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no %s line in %+v", name, rep.Features)
	return FeatureStatus{}
}
