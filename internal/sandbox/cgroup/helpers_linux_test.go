package cgroup

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// skipOrFail skips when the host lacks what the test needs, unless
// CODELLM_REQUIRE_SANDBOX=1 makes a missing sandbox a failure (CI on hosts
// that must enforce limits).
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
		t.Fatalf("CODELLM_REQUIRE_SANDBOX=1 but: "+format, args...)
	}
	t.Skipf(format, args...)
}

// requireHost returns the detected host or skips the test.
func requireHost(t testing.TB) *Host {
	t.Helper()
	h, err := Detect()
	if err != nil {
		skipOrFail(t, "no usable cgroups on this host: %v", err)
	}
	return h
}

// requireV2Host builds a v2 Host on the unified hierarchy even when it has
// no controllers (hybrid hosts): core features (cgroup.procs, cgroup.kill,
// cgroup.freeze, cgroup.events, cpu.stat, CLONE_INTO_CGROUP) still work, so
// the v2 code paths are exercised on any host that mounts cgroup2.
func requireV2Host(t testing.TB) *Host {
	t.Helper()
	if h, err := Detect(); err == nil && h.version == 2 {
		return h
	}
	mounts, err := readMountinfo("/proc/self/mountinfo")
	if err != nil {
		skipOrFail(t, "mountinfo: %v", err)
	}
	cgs, err := readProcCgroup("/proc/self/cgroup")
	if err != nil {
		skipOrFail(t, "/proc/self/cgroup: %v", err)
	}
	var v2m []mountEntry
	for _, m := range mounts {
		if m.fstype == "cgroup2" {
			v2m = append(v2m, m)
		}
	}
	var rel string
	for _, e := range cgs {
		if e.id == 0 && len(e.controllers) == 0 {
			rel = e.path
		}
	}
	if len(v2m) == 0 || rel == "" {
		skipOrFail(t, "no cgroup2 mount to exercise the v2 code path")
	}
	dir, ok := resolve(rel, v2m)
	if !ok {
		skipOrFail(t, "own v2 cgroup %q not visible", rel)
	}
	name := "codellm-test-" + randHex(6)
	base := dir + "/" + name
	if err := unix.Mkdir(base, 0o755); err != nil {
		skipOrFail(t, "cannot create a v2 test base %s: %v", base, err)
	}
	t.Cleanup(func() {
		if err := unix.Rmdir(base); err != nil {
			t.Errorf("rmdir v2 test base: %v", err)
		}
	})
	brel := strings.TrimSuffix(rel, "/") + "/" + name
	return newV2Host(base, brel, nil)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func testName(t testing.TB) string {
	t.Helper()
	return "t-" + randHex(8)
}

// newTestGroup creates a group and registers its removal, checking that
// nothing is left on disk.
func newTestGroup(t testing.TB, h *Host, lim Limits) *Group {
	t.Helper()
	g, err := h.NewGroup(testName(t), lim)
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Errorf("Remove: %v", err)
		}
		for _, d := range g.dirs {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still exists after Remove (stat: %v)", d, err)
			}
		}
	})
	return g
}

func python(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		skipOrFail(t, "python3 not found for the probe")
	}
	return p
}

// gatedCmd starts argv behind a shell that waits for one line on stdin, so
// the test can put the process into a group before the probe runs (the
// same order the sandbox uses: join the group, then exec user code).
type gatedCmd struct {
	cmd  *exec.Cmd
	gate io.WriteCloser
	out  *strings.Builder
}

func startGated(t testing.TB, argv ...string) *gatedCmd {
	t.Helper()
	return startGatedAttr(t, nil, argv...)
}

func startGatedAttr(t testing.TB, attr *syscall.SysProcAttr, argv ...string) *gatedCmd {
	t.Helper()
	script := `read _ && exec "$@"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, argv...)...)
	cmd.SysProcAttr = attr
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gc := &gatedCmd{cmd: cmd, gate: gate, out: &out}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return gc
}

// run opens the gate and waits (bounded) for the probe to finish.
func (gc *gatedCmd) run(t testing.TB) (*os.ProcessState, string) {
	t.Helper()
	if _, err := io.WriteString(gc.gate, "go\n"); err != nil {
		t.Fatal(err)
	}
	return gc.wait(t)
}

// wait waits (bounded) for the probe without opening the gate.
func (gc *gatedCmd) wait(t testing.TB) (*os.ProcessState, string) {
	t.Helper()
	_ = gc.gate.Close()
	done := make(chan error, 1)
	go func() { done <- gc.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = gc.cmd.Process.Kill()
		<-done
		t.Fatalf("probe hung; output: %s", gc.out.String())
	}
	return gc.cmd.ProcessState, gc.out.String()
}

func readFileString(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// procState returns the state letter of /proc/<pid>/stat, or "" when the
// process no longer exists.
func procState(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// countFDs counts this process's open descriptors.
func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// readLines reads a small text file into lines.
func readLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func mustGetsid(t testing.TB) int {
	t.Helper()
	sid, err := unix.Getsid(0)
	if err != nil {
		t.Fatal(err)
	}
	return sid
}
