package sandbox

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/sandbox/hook"
)

// The helper reports mechanisms by bit; both sides must agree.
func TestHookMechanismBits(t *testing.T) {
	for _, c := range []struct {
		ours mechSet
		hook uint32
	}{
		{mHelper, hook.MHelper}, {mUserNS, hook.MUserNS}, {mPIDNS, hook.MPIDNS}, {mMountNS, hook.MMountNS},
		{mNetNS, hook.MNetNS}, {mIPCNS, hook.MIPCNS}, {mUTSNS, hook.MUTSNS}, {mCgroupNS, hook.MCgroupNS},
		{mRootFS, hook.MRootFS}, {mLandlock, hook.MLandlock}, {mSeccomp, hook.MSeccomp}, {mCgroup, hook.MCgroup},
		{mRlimit, hook.MRlimit}, {mNoNewPrivs, hook.MNoNewPrivs}, {mCaps, hook.MCaps},
		{mOverlay, hook.MOverlay},
	} {
		if uint32(c.ours) != c.hook {
			t.Errorf("%s: sandbox bit %#x, hook bit %#x", c.ours, uint32(c.ours), c.hook)
		}
	}
}

// startHelper starts this test binary as a bare helper (no namespaces)
// with the given environment; with spec non-nil it gets the descriptors a
// real helper gets and spec on its spec pipe. It returns what the helper
// wrote on stderr and on the status pipe, and its exit code.
func startHelper(t *testing.T, env []string, spec []byte) (stderr, status string, code int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: exe, Args: helperArgv, Env: env}
	var se bytes.Buffer
	cmd.Stderr = &se
	var statR *os.File
	if spec != nil {
		specR, specW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var statW *os.File
		statR, statW, err = os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		dir, err := os.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cmd.ExtraFiles = []*os.File{specR, statW, dir}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		specR.Close()
		statW.Close()
		dir.Close()
		_, _ = specW.Write(spec)
		specW.Close()
	} else if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var st []byte
	if statR != nil {
		st, _ = io.ReadAll(statR)
		statR.Close()
	}
	_ = cmd.Wait()
	return se.String(), string(st), cmd.ProcessState.ExitCode()
}

// The point of package hook: a helper runs none of the binary's heavier
// package initialisers. Differential: the same binary started with the
// marker argv but without the environment marker only reaches the helper
// through Main, after every init (go-seccomp-bpf's syscall tables among
// them); with it, the trace stops at package hook.
func TestHelperSkipsPackageInits(t *testing.T) {
	heavy := "init github.com/elastic/go-seccomp-bpf/arch "
	late, _, code := startHelper(t, []string{"GODEBUG=inittrace=1"}, nil)
	// (Its exit code is 125 or 126 depending on which descriptors the
	// runtime happened to open by then; only the trace matters.)
	if code == 0 || !strings.Contains(late, heavy) || !strings.Contains(late, "init github.com/codellm/codellm/internal/sandbox/hook ") {
		t.Fatalf("control (no env marker): exit %d, want a failure after every init:\n%s", code, late)
	}
	early, _, code := startHelper(t, []string{"GODEBUG=inittrace=1", hook.EnvMarker + "=1"}, nil)
	if code == 0 {
		t.Fatalf("helper without a spec exited 0:\n%s", early)
	}
	// The hook's own line is never printed: its init does not return.
	if !strings.Contains(early, "init syscall ") {
		t.Fatalf("no init trace:\n%s", early)
	}
	for _, pkg := range []string{heavy, "init github.com/codellm/codellm/internal/sandbox ", "init net "} {
		if strings.Contains(early, pkg) {
			t.Fatalf("helper ran %q before confining:\n%s", pkg, early)
		}
	}
	n := strings.Count(early, "\ninit ") + 1
	t.Logf("helper ran %d package inits (%d without the early hook)", n, strings.Count(late, "\ninit ")+1)
}

// A damaged spec is refused with a precise report, never half-applied.
func TestHelperRefusesMalformedSpec(t *testing.T) {
	good := (&hook.Spec{Path: "/bin/true", Args: []string{"true"}, ProbeOnly: true}).Encode()
	_, status, code := startHelper(t, []string{hook.EnvMarker + "=1"}, good[:len(good)-3])
	_, failed, mech, reason, ok := hook.ParseStatus([]byte(status))
	if code != 125 || !ok || !failed || mech != hook.MHelper || !strings.Contains(reason, "malformed spec") {
		t.Fatalf("truncated spec: exit %d, status %q", code, status)
	}
	// The same spec whole (no mechanisms, probe only) is accepted: the
	// refusal above is about the damage.
	_, status, code = startHelper(t, []string{hook.EnvMarker + "=1"}, good)
	if code != 0 || status != string(hook.Started) {
		t.Fatalf("whole spec: exit %d, status %q", code, status)
	}
}

// The helper's own environment (marker, GOGC, GOMAXPROCS) never reaches
// the program, which gets exactly Spec.Env.
func TestHelperEnvNotInherited(t *testing.T) {
	s := nativeSandbox(t)
	o := mustRun(t, s, "/usr/bin/env")
	if o.ExitCode != 0 {
		t.Fatalf("env: %+v %s", o.Result, o.Stderr)
	}
	for _, v := range helperEnv {
		if strings.Contains(o.Stdout, strings.SplitN(v, "=", 2)[0]+"=") {
			t.Errorf("program sees helper variable %q:\n%s", v, o.Stdout)
		}
	}
	if !strings.Contains(o.Stdout, "LANG=C.UTF-8") {
		t.Errorf("program lacks its own environment:\n%s", o.Stdout)
	}
}
