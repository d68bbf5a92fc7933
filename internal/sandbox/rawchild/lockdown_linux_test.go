//go:build linux && (amd64 || arm64)

package rawchild

import (
	"encoding/binary"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/codellm/codellm/internal/sandbox/seccomp"
)

// run starts sh -c script in a user and PID namespace after p, and returns
// its output and exit status.
func run(t *testing.T, p *Prog, script string) (string, syscall.WaitStatus) {
	t.Helper()
	c := start(t, p, sh(script), userPID(t), nil)
	out, _ := io.ReadAll(c.stdout)
	for _, r := range c.records(t) {
		if err := r.Err(p); err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	return string(out), c.wait(t)
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
