//go:build linux && (amd64 || arm64)

package rawchild

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/codellm/codellm/internal/sandbox/seccomp"
	"golang.org/x/sys/unix"
)

// run starts sh -c script in a user and PID namespace after p, and returns
// its output and exit status.
func run(t *testing.T, p *Prog, script string) (string, syscall.WaitStatus) {
	t.Helper()
	return start(t, p, sh(script), userPID(t), nil).result(t, p)
}

func statusField(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Differential: in its own user namespace the program holds every
// capability of it and may gain none through exec, unless the lockdown ran.
func TestLockdownDropsCapabilitiesAndSetsNoNewPrivs(t *testing.T) {
	const script = "cat /proc/self/status"
	open, _ := run(t, &Prog{}, script)
	if statusField(open, "CapEff") == "0000000000000000" || statusField(open, "NoNewPrivs") != "0" {
		t.Fatalf("without the lockdown CapEff=%s NoNewPrivs=%s: the test shows nothing",
			statusField(open, "CapEff"), statusField(open, "NoNewPrivs"))
	}
	p := &Prog{}
	p.AddLockdown(Lockdown{NoNewPrivs: true, DropCaps: true})
	locked, _ := run(t, p, script)
	for _, f := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if v := statusField(locked, f); v != "0000000000000000" {
			t.Errorf("%s=%s after the lockdown, want none", f, v)
		}
	}
	if v := statusField(locked, "NoNewPrivs"); v != "1" {
		t.Errorf("NoNewPrivs=%s, want 1", v)
	}
}

func TestLockdownRlimits(t *testing.T) {
	p := &Prog{}
	p.AddLockdown(Lockdown{Rlimits: []Rlimit{{Name: "NOFILE", Resource: syscall.RLIMIT_NOFILE, Value: 37}}})
	out, _ := run(t, p, "ulimit -n; ulimit -Hn")
	if out != "37\n37\n" {
		t.Errorf("ulimit -n, -Hn: %q, want 37 twice", out)
	}
}

// Differential: root of its user namespace, the program can chroot; with
// the sandbox's seccomp filter the call is refused.
func TestLockdownSeccompRefusesChroot(t *testing.T) {
	const chroot = "/usr/sbin/chroot"
	if _, err := os.Stat(chroot); err != nil {
		t.Skip(err)
	}
	const script = chroot + " / /bin/true && echo chrooted"
	if out, _ := run(t, &Prog{}, script); out != "chrooted\n" {
		t.Fatalf("without the filter: %q, want chrooted: the test shows nothing", out)
	}
	prog := sandboxFilter(t)
	p := &Prog{}
	p.AddLockdown(Lockdown{NoNewPrivs: true, Seccomp: prog})
	out, ws := run(t, p, script+" 2>&1")
	if strings.Contains(out, "chrooted") || ws.ExitStatus() == 0 || !strings.Contains(out, "not permitted") {
		t.Errorf("with the filter: %q (%v), want chroot refused with EPERM", out, ws)
	}
}

func TestLockdownRefusesABadFilter(t *testing.T) {
	p := &Prog{}
	p.AddLockdown(Lockdown{Seccomp: make([]byte, 12)})
	if _, err := Start(p, sh("exit 0"), Attr{}); err == nil || !strings.Contains(err.Error(), "seccomp filter of 12 bytes") {
		t.Errorf("Start: %v, want the 12-byte filter refused", err)
	}
}

// Access rights of Landlock ABI 1 (every kernel with Landlock has them).
const (
	llExecute  = 1 << 0
	llReadFile = 1 << 2
	llReadDir  = 1 << 3
	llABI1     = 1<<13 - 1
)

func systemRules() []LandlockRule {
	var rules []LandlockRule
	for _, d := range []string{"/usr", "/bin", "/lib", "/lib64", "/etc"} {
		rules = append(rules, LandlockRule{Path: d, Access: llExecute | llReadFile | llReadDir, Optional: true})
	}
	return rules
}

// Differential: the program reads a file outside the rules' paths unless
// Landlock restricts it; optional rules for missing paths are skipped.
func TestLockdownLandlockConfinesReads(t *testing.T) {
	if _, _, e := syscall.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION); e != 0 {
		t.Skipf("no Landlock: %v", e)
	}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "cat " + secret + " 2>&1"
	if out, _ := run(t, &Prog{}, script); out != "s3cret" {
		t.Fatalf("without Landlock: %q: the test shows nothing", out)
	}
	rules := append(systemRules(), LandlockRule{Path: "/nonexistent-codellm-dir", Access: llReadFile, Optional: true})
	p := &Prog{}
	p.AddLockdown(Lockdown{NoNewPrivs: true, Landlock: &Landlock{ABI: 1, HandledFS: llABI1, Rules: rules}})
	out, ws := run(t, p, script)
	if strings.Contains(out, "s3cret") || ws.ExitStatus() == 0 || !strings.Contains(out, "Permission denied") {
		t.Errorf("with Landlock: %q (%v), want the read denied", out, ws)
	}
}

func TestLockdownLandlockNamesAMissingRequiredPath(t *testing.T) {
	if _, _, e := syscall.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION); e != 0 {
		t.Skipf("no Landlock: %v", e)
	}
	p := &Prog{}
	p.AddLockdown(Lockdown{NoNewPrivs: true, Landlock: &Landlock{ABI: 1, HandledFS: llABI1,
		Rules: append(systemRules(), LandlockRule{Path: "/nonexistent-codellm-dir", Access: llReadFile})}})
	c := start(t, p, sh("exit 0"), userPID(t), nil)
	recs := c.records(t)
	c.wait(t)
	if len(recs) != 1 {
		t.Fatalf("records %+v, want one failure", recs)
	}
	if err := recs[0].Err(); err == nil || !strings.Contains(err.Error(), "open /nonexistent-codellm-dir") ||
		!errors.Is(err, syscall.ENOENT) {
		t.Errorf("error %v, want the open of the missing rule path named, ENOENT", err)
	}
}

// sandboxFilter is the sandbox's own seccomp program as the kernel reads
// it (what package sandbox hands package hook).
func sandboxFilter(t testing.TB) []byte {
	raw, err := seccomp.Program()
	if err != nil {
		t.Skip(err)
	}
	prog := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		prog = binary.NativeEndian.AppendUint16(prog, in.Op)
		prog = append(prog, in.Jt, in.Jf)
		prog = binary.NativeEndian.AppendUint32(prog, in.K)
	}
	return prog
}
