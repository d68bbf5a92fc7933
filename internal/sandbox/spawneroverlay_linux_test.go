package sandbox

import (
	"bufio"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// overlayDevs is what a block says of its /usr and /etc/ld.so.cache: the
// device numbers of the overlays it sees them through.
func overlayDevs(t *testing.T, s *Sandbox) string {
	t.Helper()
	o := mustRun(t, s, "/usr/bin/stat", "-c", "%d", "/usr", "/etc/ld.so.cache")
	if o.ExitCode != 0 || strings.Count(o.Stdout, "\n") != 2 {
		t.Fatalf("stat in a block: %+v", o)
	}
	return o.Stdout
}

// devsMeanwhile is overlayDevs of a block that is still running while
// another block (overlayDevs again) runs: two superblocks alive at once
// have different device numbers, while a freed one's number is reused.
func devsMeanwhile(t *testing.T, s *Sandbox) (held, other string) {
	t.Helper()
	dir := workdir(t, nil)
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	p, err := r.Start(Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "stat -c %d /usr /etc/ld.so.cache; cat >/dev/null"},
		Env: stdEnv(dir), Dir: dir, Stdin: inR, Stdout: outW, Stderr: outW})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		t.Fatal(err)
	}
	sc := bufio.NewScanner(outR)
	for i := 0; i < 2 && sc.Scan(); i++ {
		held += sc.Text() + "\n"
	}
	other = overlayDevs(t, s)
	inW.Close()
	if res := p.Wait(); res.ExitCode != 0 {
		t.Fatalf("the held block: %+v (said %q)", res, held)
	}
	return held, other
}

// freshOverlaidSandbox is a native Sandbox of its own whose blocks get
// private roots with overlays (root only).
func freshOverlaidSandbox(t *testing.T) *Sandbox {
	t.Helper()
	nativeSandbox(t)
	if os.Geteuid() != 0 {
		t.Skip("the spawner overlays directories in place only as root")
	}
	s, err := New(Config{Mode: ModeNative})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !overlaidRoot(s.plat.runMechs()) {
		skipOrFail(t, "blocks here get no overlays: %s", s.plat.detail[mOverlay])
	}
	return s
}

// Every block of a Sandbox sees the host directories through the spawner's
// overlays, made once (the same superblocks, so a warm dentry cache and no
// teardown per block); without them (the spawner told to overlay nothing)
// each block mounts overlays of its own.
func TestSpawnerOverlaysServeEveryBlock(t *testing.T) {
	s := freshOverlaidSandbox(t)
	if a, b := devsMeanwhile(t, s); a != b {
		t.Errorf("two blocks saw different overlays (%q, %q): not the spawner's", a, b)
	}
	s.plat.spawner.setOverlay(nil, nil)
	if a, b := devsMeanwhile(t, s); a == b {
		t.Errorf("without the spawner's overlays two blocks saw the same devices %q", a)
	}
}

// A spawner's overlays are replaced once they are overlayMaxAge old (a
// lower layer changed since may show stale entries): the next block starts
// a new spawner in the background, later blocks get it, and the old one is
// closed and reaped.
func TestSpawnerOverlaysAreReplaced(t *testing.T) {
	s := freshOverlaidSandbox(t)
	overlayDevs(t, s)
	h := s.plat.spawner
	h.mu.Lock()
	if len(h.all) != 1 {
		h.mu.Unlock()
		t.Fatalf("%d spawners after one block, want 1", len(h.all))
	}
	old := h.all[0].sp.PID()
	h.all[0].born = time.Now().Add(-overlayMaxAge)
	h.mu.Unlock()
	overlayDevs(t, s) // served by the old spawner while it asks for the new one
	h.replaced.Wait()
	now := h.pids()
	if len(now) != 1 || now[0] == old {
		t.Fatalf("spawner %d not replaced (now %v)", old, now)
	}
	overlayDevs(t, s)
	if err := syscall.Kill(old, 0); err == nil {
		t.Errorf("the replaced spawner %d is still there", old)
	}
}
