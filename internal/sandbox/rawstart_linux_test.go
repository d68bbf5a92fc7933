//go:build linux

package sandbox

import (
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/rawchild"
	"github.com/codellm/codellm/internal/sandbox/rawhelper"
)

// One reader serves both helpers: the raw init's Started and Waited
// records are the Go init's byte for byte.
func TestRawRecordsAreTheGoInitsRecords(t *testing.T) {
	if rawchild.KindStarted != hook.Started {
		t.Errorf("rawchild's Started kind %q, hook's %q", rune(rawchild.KindStarted), rune(hook.Started))
	}
	if w := hook.WaitRecord(0x1234); w[0] != rawchild.KindWaited || binary.LittleEndian.Uint32(w[1:]) != 0x1234 {
		t.Errorf("hook's wait record %x is not rawchild's 'W' + little-endian status", w)
	}
}

// failRecord is a raw helper's failure record as the child writes it.
func failRecord(step, errno, tag uint32, what string) []byte {
	b := []byte{rawchild.KindFailed}
	b = binary.LittleEndian.AppendUint32(b, step)
	b = binary.LittleEndian.AppendUint32(b, errno)
	b = binary.LittleEndian.AppendUint32(b, tag)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(what)))
	return append(b, what...)
}

// A raw helper's refusal names its mechanism and step as the Go helper's
// does (the tag is the mechanism bit), the exec's names the program, and a
// workdir copy out of space says the workdir does not fit.
func TestRawFailureNamesTheMechanism(t *testing.T) {
	for _, c := range []struct {
		rec        []byte
		mech, text string
	}{
		{failRecord(40, uint32(syscall.ENOENT), hook.MLandlock, "landlock: build ruleset: open /x"), MechLandlock, "landlock: build ruleset: open /x: no such file or directory"},
		{failRecord(9, uint32(syscall.EPERM), hook.MRootFS, "mount /proc"), MechRootFS, "build root filesystem: mount /proc: operation not permitted"},
		{failRecord(70, uint32(syscall.ENOENT), hook.MExec, "/usr/bin/nope"), "exec", "/usr/bin/nope: no such file or directory"},
		{failRecord(12, uint32(syscall.ENOSPC), hook.MRootFS, "copy workdir: copy a"), MechRootFS, hook.ErrWorkdirTooLargeText},
	} {
		err := helperFailure(c.rec, nil, nil)
		var ue *UnavailableError
		if !errors.As(err, &ue) || ue.Mechanism != c.mech || !strings.Contains(ue.Reason, c.text) {
			t.Errorf("record %q: %v, want mechanism %s and %q", c.rec, err, c.mech, c.text)
		}
	}
}

// BenchmarkRawCompile is the spawner's own work per raw block, past the
// socket: decode the server's spec and compile it. Every byte it allocates
// lands on pages the spawner shares copy-on-write with the raw helpers
// still running (each a fork of it), so allocations are the number to
// watch, beside the time.
func BenchmarkRawCompile(b *testing.B) {
	s := nativeSandbox(b)
	r, err := s.NewRun(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	dir := workdir(b, map[string]string{"run.sh": "echo hi\n"})
	use := blockUse(s.plat.runMechs(), s.cfg.Network, nil)
	hs, err := r.helperSpec(&Spec{Path: "/bin/bash", Args: []string{"bash", "run.sh"}, Dir: dir}, use, false)
	if err != nil {
		b.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	hs.Mech &^= hook.MOverlay // binds where the spawner would bind its overlays: the same steps
	enc := hs.Encode()
	var p rawchild.Prog
	b.ReportAllocs()
	for b.Loop() {
		sp, err := hook.Decode(enc)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rawhelper.Compile(&p, sp, rawhelper.Host{UID: 1000, GID: 1000, Dir: int(d.Fd())}); err != nil {
			b.Fatal(err)
		}
	}
}

// The spawner forks the next block's raw helper ahead, after each reply:
// after two blocks the Sandbox has one idle helper, and Close leaves none
// behind (the spawner kills it, the server reaps it).
func TestRawIdleHelperEndsWithItsSandbox(t *testing.T) {
	if goHelperForTests {
		t.Skip("CODELLM_TEST_GO_HELPER=1: every block gets the Go helper, no raw helper is forked ahead")
	}
	before := idleHelpers(t)
	s, err := New(Config{Mode: ModeNative})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Report().Ready {
		skipOrFail(t, "native sandbox unavailable: %v", s.Report().Missing)
	}
	if bornInto := s.plat.cg != nil && s.plat.cg.Info().Version == 2 && !s.plat.noClone3; bornInto {
		t.Skip("cgroup v2: a raw helper is born in its block's cgroup, which is not known ahead, so none is forked ahead")
	}
	var idle []int
	for i := range 2 {
		if out := mustRun(t, s, "/bin/sh", "-c", "echo ok"); out.Stdout != "ok\n" || out.ExitCode != 0 {
			t.Fatalf("block %d: %+v", i, out)
		}
		idle = slices.DeleteFunc(idleHelpers(t), func(pid int) bool { return slices.Contains(before, pid) })
	}
	if len(idle) != 1 {
		t.Errorf("idle raw helpers of this Sandbox after two blocks: %v, want one (forked after the last reply)", idle)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range idle {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("the idle helper %d is still a process (unreaped) after Close: %s", pid, describePIDs([]int{pid}))
		}
	}
}
