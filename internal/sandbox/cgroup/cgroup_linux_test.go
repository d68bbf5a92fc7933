package cgroup

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDetectThisHost(t *testing.T) {
	h := requireHost(t)
	in := h.Info()
	t.Logf("info: %+v", in)
	if in.Version != 1 && in.Version != 2 {
		t.Fatalf("version %d", in.Version)
	}
	if in.Err != "" || in.Path == "" {
		t.Fatalf("usable host with Err=%q Path=%q", in.Err, in.Path)
	}
	for _, c := range []string{"memory", "pids"} {
		if !slices.Contains(in.Controllers, c) {
			t.Errorf("controller %s missing from %v", c, in.Controllers)
		}
	}
	if st, err := os.Stat(in.Path); err != nil || !st.IsDir() {
		t.Fatalf("Info.Path %s: %v", in.Path, err)
	}
	h2, _ := Detect()
	if h2 != h {
		t.Error("Detect is not cached")
	}
}

func TestNewGroupWritesLimits(t *testing.T) {
	h := requireHost(t)
	lim := Limits{Memory: 64 << 20, Pids: 32, CPUs: 0.5}
	if h.cpu < 0 {
		lim.CPUs = 0
	}
	g := newTestGroup(t, h, lim)
	if !strings.HasPrefix(g.Path(), h.Info().Path+"/") {
		t.Errorf("Path %s not under %s", g.Path(), h.Info().Path)
	}
	switch h.version {
	case 2:
		d := g.dirs[0]
		if got := readFileString(t, d+"/memory.max"); got != "67108864" {
			t.Errorf("memory.max = %s", got)
		}
		if _, err := os.Stat(d + "/memory.swap.max"); err == nil {
			if got := readFileString(t, d+"/memory.swap.max"); got != "0" {
				t.Errorf("memory.swap.max = %s", got)
			}
		}
		if _, err := os.Stat(d + "/memory.oom.group"); err == nil {
			if got := readFileString(t, d+"/memory.oom.group"); got != "1" {
				t.Errorf("memory.oom.group = %s", got)
			}
		}
		if got := readFileString(t, d+"/pids.max"); got != "32" {
			t.Errorf("pids.max = %s", got)
		}
		if lim.CPUs > 0 {
			if got := readFileString(t, d+"/cpu.max"); got != "50000 100000" {
				t.Errorf("cpu.max = %s", got)
			}
		}
	case 1:
		m := g.dirs[h.mem]
		if got := readFileString(t, m+"/memory.limit_in_bytes"); got != "67108864" {
			t.Errorf("memory.limit_in_bytes = %s", got)
		}
		if h.memsw {
			if got := readFileString(t, m+"/memory.memsw.limit_in_bytes"); got != "67108864" {
				t.Errorf("memory.memsw.limit_in_bytes = %s", got)
			}
		}
		if got := readFileString(t, m+"/memory.use_hierarchy"); got != "1" {
			t.Errorf("memory.use_hierarchy = %s", got)
		}
		if got := readFileString(t, g.dirs[h.pids]+"/pids.max"); got != "32" {
			t.Errorf("pids.max = %s", got)
		}
		if lim.CPUs > 0 {
			c := g.dirs[h.cpu]
			if got := readFileString(t, c+"/cpu.cfs_quota_us"); got != "50000" {
				t.Errorf("cfs_quota_us = %s", got)
			}
			if got := readFileString(t, c+"/cpu.cfs_period_us"); got != "100000" {
				t.Errorf("cfs_period_us = %s", got)
			}
		}
	}

	// An unlimited group leaves the kernel defaults alone.
	u := newTestGroup(t, h, Limits{})
	if h.version == 1 {
		if got := readFileString(t, u.dirs[h.pids]+"/pids.max"); got != "max" {
			t.Errorf("unlimited pids.max = %s", got)
		}
	} else if got := readFileString(t, u.dirs[0]+"/pids.max"); got != "max" {
		t.Errorf("unlimited pids.max = %s", got)
	}

	// Same name again: refused, and the existing group is untouched.
	if _, err := h.NewGroup(g.name, Limits{}); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate NewGroup: %v, want ErrExists", err)
	}
	if _, err := os.Stat(g.Path()); err != nil {
		t.Errorf("existing group damaged by duplicate NewGroup: %v", err)
	}

	// Child groups appear in every hierarchy and go away with the parent.
	c, err := g.NewChild("block-0")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range c.dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("child dir: %v", err)
		}
	}
	if _, err := g.NewChild("block-0"); !errors.Is(err, ErrExists) {
		t.Errorf("duplicate child: %v", err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range append(slices.Clone(c.dirs), g.dirs...) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", d, err)
		}
	}
	if err := c.Remove(); err != nil {
		t.Errorf("child Remove after parent Remove: %v", err)
	}
	if _, err := g.NewChild("x"); !errors.Is(err, ErrRemoved) {
		t.Errorf("NewChild after Remove: %v", err)
	}
	if err := g.Add(os.Getpid()); !errors.Is(err, ErrRemoved) {
		t.Errorf("Add after Remove: %v", err)
	}
	if _, err := g.Stats(); !errors.Is(err, ErrRemoved) {
		t.Errorf("Stats after Remove: %v", err)
	}
}

func TestNewGroupRejectsBadInput(t *testing.T) {
	h := requireHost(t)
	for _, name := range []string{"", ".", "..", "a/b", "../x", ".hidden", "a b", "x\x00y", "supervisor", "memory.max", "cgroup.procs", strings.Repeat("a", 129), "tab\t"} {
		if _, err := h.NewGroup(name, Limits{}); !errors.Is(err, ErrInvalidName) {
			t.Errorf("NewGroup(%q): %v, want ErrInvalidName", name, err)
		}
	}
	for _, lim := range []Limits{{Memory: -1}, {Memory: 100}, {Pids: -3}, {CPUs: -1}, {CPUs: 0.001}} {
		if _, err := h.NewGroup(testName(t), lim); !errors.Is(err, ErrInvalidLimits) {
			t.Errorf("NewGroup(%+v): %v, want ErrInvalidLimits", lim, err)
		}
	}
	// Nothing was created by the refused calls.
	ents, err := os.ReadDir(h.Info().Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() && (e.Name() == "a" || e.Name() == "supervisor" && h.version == 1) {
			t.Errorf("refused call left %s", e.Name())
		}
	}
}

// memProbe allocates and touches 256 MiB.
const memProbe = `b = b"x" * (256 << 20); print(len(b))`

func TestMemoryLimitOOMKills(t *testing.T) {
	h := requireHost(t)
	py := python(t)
	// Differential: without a limit the probe completes.
	free := newTestGroup(t, h, Limits{})
	gc := startGated(t, py, "-c", memProbe)
	if err := free.Add(gc.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	st, out := gc.run(t)
	if !st.Success() {
		t.Fatalf("unlimited probe failed: %v %s", st, out)
	}
	if s, err := free.Stats(); err != nil || s.OOMKills != 0 || s.MemoryPeak < 200<<20 {
		t.Errorf("unlimited stats %+v, %v", s, err)
	}

	// With 64 MiB on the run, a probe in a per-block child is OOM-killed:
	// the run limit applies to its children.
	run := newTestGroup(t, h, Limits{Memory: 64 << 20})
	block, err := run.NewChild("block")
	if err != nil {
		t.Fatal(err)
	}
	gc = startGated(t, py, "-c", memProbe)
	if err := block.Add(gc.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	st, out = gc.run(t)
	ws := st.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("limited probe: %v (output %q), want SIGKILL by the OOM killer", st, out)
	}
	s, err := run.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run stats %+v", s)
	if s.OOMKills < 1 {
		t.Errorf("OOMKills = %d, want > 0", s.OOMKills)
	}
	if s.MemoryPeak <= 0 || s.MemoryPeak > 64<<20 {
		t.Errorf("MemoryPeak = %d, want in (0, 64 MiB]", s.MemoryPeak)
	}
	if bs, err := block.Stats(); err != nil || bs.MemoryPeak <= 0 {
		t.Errorf("block stats %+v, %v", bs, err)
	}
}

// TestMemoryLimitIsPerRun: the limit bounds the run as a whole, not each
// process. One 64 MiB process fits a 96 MiB run; two of them, in separate
// block groups at the same time, do not. Each probe allocates, raises its
// flag and waits for the other's flag: exiting 0 would prove both held
// 64 MiB at once.
func TestMemoryLimitIsPerRun(t *testing.T) {
	h := requireHost(t)
	py := python(t)
	dir := t.TempDir()
	const probe = `
import os, sys, time
b = b"x" * (64 << 20)
open(sys.argv[1], "w").close()
end = time.time() + 30
while time.time() < end:
    if os.path.exists(sys.argv[2]):
        sys.exit(0)
    time.sleep(0.01)
sys.exit(3)
`
	run := newTestGroup(t, h, Limits{Memory: 96 << 20})
	one, err := run.NewChild("one")
	if err != nil {
		t.Fatal(err)
	}
	// Alone, the probe fits (its partner flag is made to exist already).
	self := filepath.Join(dir, "self")
	gc := startGated(t, py, "-c", probe, self, self)
	if err := one.Add(gc.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if st, out := gc.run(t); !st.Success() {
		t.Fatalf("a single 64 MiB process in a 96 MiB run failed: %v %s", st, out)
	}

	flags := []string{filepath.Join(dir, "a"), filepath.Join(dir, "b")}
	exits := make(chan *os.ProcessState, 2)
	for i, name := range []string{"a", "b"} {
		c, err := run.NewChild(name)
		if err != nil {
			t.Fatal(err)
		}
		g := startGated(t, py, "-c", probe, flags[i], flags[1-i])
		if err := c.Add(g.cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if _, err := g.gate.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		go func() { _ = g.cmd.Wait(); exits <- g.cmd.ProcessState }()
	}
	first := <-exits
	if first.Success() {
		t.Fatal("two 64 MiB processes coexisted in a 96 MiB run")
	}
	// The survivor (if the OOM killer left one) would wait for a partner
	// that is gone: end it.
	if err := run.Kill(); err != nil {
		t.Fatal(err)
	}
	if second := <-exits; second.Success() {
		t.Fatal("two 64 MiB processes coexisted in a 96 MiB run")
	}
	if ws := first.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("first exit %v, want SIGKILL by the OOM killer", first)
	}
	if s, err := run.Stats(); err != nil || s.OOMKills < 1 {
		t.Errorf("stats %+v, %v", s, err)
	}
}

// forkProbe forks up to 64 sleeping children and prints how many it got.
const forkProbe = `
import os, time
kids = []
for i in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
print(len(kids), flush=True)
for k in kids:
    os.kill(k, 9)
for k in kids:
    os.waitpid(k, 0)
`

func TestPidsLimitBoundsForks(t *testing.T) {
	h := requireHost(t)
	py := python(t)
	forks := func(g *Group) int {
		gc := startGated(t, py, "-c", forkProbe)
		if err := g.Add(gc.cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		st, out := gc.run(t)
		if !st.Success() {
			t.Fatalf("fork probe: %v %s", st, out)
		}
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("fork probe output %q", out)
		}
		return n
	}
	free := newTestGroup(t, h, Limits{})
	if n := forks(free); n != 64 {
		t.Fatalf("without a limit the probe forked %d, want 64", n)
	}
	lim := newTestGroup(t, h, Limits{Pids: 16})
	block, err := lim.NewChild("block")
	if err != nil {
		t.Fatal(err)
	}
	if n := forks(block); n >= 16 {
		t.Fatalf("with pids.max=16 the probe forked %d", n)
	}
	s, err := lim.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.PidsMax < 1 {
		t.Errorf("PidsMax = %d, want > 0", s.PidsMax)
	}
	if fs, _ := free.Stats(); fs.PidsMax != 0 {
		t.Errorf("unlimited group PidsMax = %d", fs.PidsMax)
	}
}

func TestKillDaemonisedTreeV1OrDetected(t *testing.T) {
	testKillTree(t, requireHost(t), false)
}

func TestKillDaemonisedTreeV2(t *testing.T) {
	testKillTree(t, requireV2Host(t), false)
}

func TestKillDaemonisedTreeV2FreezeFallback(t *testing.T) {
	h := requireV2Host(t)
	testKillTree(t, h, true)
}

// testKillTree starts a shell that leaves behind a daemon (setsid + double
// fork, reparented away from us) and checks that Kill ends both.
func testKillTree(t *testing.T, h *Host, forceFallback bool) {
	g := newTestGroup(t, h, Limits{})
	block, err := g.NewChild("block")
	if err != nil {
		t.Fatal(err)
	}
	pidfile := filepath.Join(t.TempDir(), "daemon.pid")
	script := fmt.Sprintf(`setsid sh -c 'sleep 300 & echo $! > %s' </dev/null >/dev/null 2>&1 & wait; exec sleep 300`, pidfile)
	gc := startGatedAttr(t, &syscall.SysProcAttr{Setpgid: true}, "/bin/sh", "-c", script)
	if err := block.Add(gc.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.gate.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	var daemon int
	deadline := time.Now().Add(10 * time.Second)
	for daemon == 0 && time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidfile); err == nil && strings.HasSuffix(string(b), "\n") {
			daemon, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if daemon == 0 {
		t.Fatal("daemon did not start")
	}
	pfd, err := unix.PidfdOpen(daemon, 0)
	if err != nil {
		t.Fatalf("pidfd_open(daemon): %v", err)
	}
	defer unix.Close(pfd)
	// It really escaped: another session, not our child.
	if sid, _ := unix.Getsid(daemon); sid == mustGetsid(t) {
		t.Fatalf("daemon shares our session")
	}
	if !g.member(daemon, 0) {
		t.Fatalf("daemon %d not in the group: %v", daemon, readLines("/proc/"+strconv.Itoa(daemon)+"/cgroup"))
	}
	if pop, err := g.Populated(); err != nil || !pop {
		t.Fatalf("Populated = %v, %v", pop, err)
	}
	fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
	pollExit := func(ms int) bool {
		for {
			n, err := unix.Poll(fds, ms)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				t.Fatalf("poll: %v", err)
			}
			return n == 1
		}
	}
	// Differential: the conventional process-group kill misses the daemon.
	if err := unix.Kill(-gc.cmd.Process.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, _ := gc.wait(t)
	if ws := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("shell: %v, want killed", st)
	}
	if pollExit(200) {
		t.Fatal("daemon died from the process-group kill: the probe does not escape")
	}

	if forceFallback {
		thaw, err := g.freeze()
		if err != nil {
			t.Fatalf("freeze: %v", err)
		}
		if err := g.signalAll(); err != nil {
			t.Fatal(err)
		}
		if err := thaw(); err != nil {
			t.Fatal(err)
		}
	} else if err := g.Kill(); err != nil {
		t.Fatal(err)
	}

	// The daemon exits: its pidfd becomes readable, and /proc shows it gone,
	// a zombie awaiting its (foreign) reaper, or dead ("X") while that reaper
	// collects it (seen once in a CI boot of arm64 Linux 6.1).
	if !pollExit(10000) {
		t.Fatalf("daemon still alive after Kill, state %q", procState(daemon))
	}
	if s := procState(daemon); s != "" && s != "Z" && s != "X" {
		t.Errorf("daemon state %q after Kill", s)
	}
	if err := g.WaitEmpty(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveKillsAndLeaksNothing(t *testing.T) {
	h := requireHost(t)
	before := countFDs(t)
	g, err := h.NewGroup(testName(t), Limits{Memory: 128 << 20, Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.NewChild("b")
	if err != nil {
		t.Fatal(err)
	}
	fd, ok := c.FD()
	if ok != (h.version == 2) {
		t.Fatalf("FD ok=%v on v%d", ok, h.version)
	}
	if ok && fd < 0 {
		t.Fatal("FD < 0")
	}
	// A live process inside: Remove must kill it, not fail or leak it.
	gc := startGated(t, "/bin/sleep", "300")
	if err := c.Add(gc.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	st, _ := gc.wait(t)
	if ws := st.Sys().(syscall.WaitStatus); !ws.Signaled() {
		t.Errorf("process in removed group: %v", st)
	}
	for _, d := range append(slices.Clone(g.dirs), c.dirs...) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind", d)
		}
	}
	if err := g.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, ok := c.FD(); ok {
		t.Error("FD of removed child still offered")
	}
	if after := countFDs(t); after != before {
		t.Errorf("fds before %d after %d", before, after)
	}
}

func TestStatsCPU(t *testing.T) {
	for _, v := range []struct {
		name string
		host func(testing.TB) *Host
	}{{"detected", requireHost}, {"v2", requireV2Host}} {
		t.Run(v.name, func(t *testing.T) {
			h := v.host(t)
			if h.cpuacct < 0 {
				skipOrFail(t, "no CPU accounting on this host")
			}
			g := newTestGroup(t, h, Limits{})
			gc := startGated(t, python(t), "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t < 0.3: pass")
			if err := g.Add(gc.cmd.Process.Pid); err != nil {
				t.Fatal(err)
			}
			if st, out := gc.run(t); !st.Success() {
				t.Fatalf("%v %s", st, out)
			}
			s, err := g.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s.CPU < 250*time.Millisecond || s.CPU > 30*time.Second {
				t.Errorf("CPU = %v, want about 300ms", s.CPU)
			}
		})
	}
}

// TestCloneIntoCgroup starts a process directly inside a v2 group through
// FD (CLONE_INTO_CGROUP), the race-free way the sandbox should use.
func TestCloneIntoCgroup(t *testing.T) {
	h := requireV2Host(t)
	g := newTestGroup(t, h, Limits{})
	fd, ok := g.FD()
	if !ok {
		t.Fatal("no FD on v2")
	}
	if fd2, _ := g.FD(); fd2 != fd {
		t.Errorf("FD not cached: %d != %d", fd2, fd)
	}
	cmd := exec.Command("/bin/cat", "/proc/self/cgroup")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "0::"+g.rels[0]+"\n") {
		t.Fatalf("process not born in %s: %s", g.rels[0], out)
	}
}

func TestV2LimitsFailClosed(t *testing.T) {
	h := requireV2Host(t)
	if h.mem >= 0 {
		t.Skip("this v2 host has a memory controller")
	}
	if _, err := h.NewGroup(testName(t), Limits{Memory: 64 << 20}); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("memory limit without controller: %v, want ErrNotSupported", err)
	}
	if _, err := h.NewGroup(testName(t), Limits{Pids: 5}); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("pids limit without controller: %v, want ErrNotSupported", err)
	}
	ents, _ := os.ReadDir(h.Info().Path)
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("refused NewGroup left %s", e.Name())
		}
	}
}

// TestKillWithoutFreezer exercises the last-resort kill loop (v1 host without
// a freezer hierarchy): pids are killed one by one and WaitEmpty re-kills
// until nothing is left.
func TestKillWithoutFreezer(t *testing.T) {
	h := requireHost(t)
	nf := *h
	nf.freezer = -1
	if nf.version == 2 {
		t.Skip("v2 uses cgroup.kill")
	}
	testKillTree(t, &nf, false)
}

// TestJoinViaProcsFiles: a process joins the group itself by writing "0" to
// every ProcsFiles entry (or, single-threaded on v1, every TaskFiles entry)
// before running the payload, as a sandbox init does.
func TestJoinViaProcsFiles(t *testing.T) {
	h := requireHost(t)
	lists := map[string]func(*Group) []string{"procs": (*Group).ProcsFiles}
	if h.version == 1 {
		lists["tasks"] = (*Group).TaskFiles
	}
	for name, files := range lists {
		g := newTestGroup(t, h, Limits{Pids: 8})
		var script strings.Builder
		for _, f := range files(g) {
			fmt.Fprintf(&script, "echo 0 > %s && ", f)
		}
		script.WriteString("exec cat /proc/self/cgroup")
		out, err := exec.Command("/bin/sh", "-c", script.String()).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", name, err, out)
		}
		for i, hr := range h.hiers {
			want := strconv.Itoa(hr.id) + ":"
			found := false
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, want) && strings.HasSuffix(line, ":"+g.rels[i]) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: not in %s (hierarchy %d): %s", name, g.rels[i], hr.id, out)
			}
		}
	}
}

// TestConcurrentGroups: the server creates and removes run groups from many
// goroutines at once; stats and kills may race with removal.
func TestConcurrentGroups(t *testing.T) {
	h := requireHost(t)
	errs := make(chan error, 64)
	for w := 0; w < 8; w++ {
		go func() {
			for i := 0; i < 4; i++ {
				g, err := h.NewGroup(testName(t), Limits{Memory: 32 << 20, Pids: 8})
				if err != nil {
					errs <- err
					continue
				}
				c, err := g.NewChild("b")
				if err == nil {
					done := make(chan struct{})
					go func() { _, _ = c.Stats(); _ = c.Kill(); close(done) }()
					err = g.Remove()
					<-done
				}
				errs <- err
			}
		}()
	}
	for i := 0; i < 32; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestRemoveForeignSubgroup: a sub-cgroup that was not made through this
// package (e.g. by an operator) does not make Remove fail or leak.
func TestRemoveForeignSubgroup(t *testing.T) {
	h := requireHost(t)
	g, err := h.NewGroup(testName(t), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range g.dirs {
		if err := os.MkdirAll(d+"/x/y", 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, d := range g.dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind", d)
		}
	}
}

// Populated sees a process in a child group from the run group too, and
// neither an exited one still unreaped (as rmdir does not) nor a reaped
// one; on v1 it agrees with listing cgroup.procs in every hierarchy at each
// step, whether pids.current lets it skip the listing (empty, reaped) or not
// (running, zombie).
func TestPopulatedFollowsTheSubtree(t *testing.T) {
	h := requireHost(t)
	g := newTestGroup(t, h, Limits{Pids: 16})
	c, err := g.NewChild("b")
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, want bool) {
		t.Helper()
		for name, gr := range map[string]*Group{"run": g, "child": c} {
			pop, err := gr.Populated()
			if err != nil || pop != want {
				t.Errorf("%s: %s Populated = %v, %v; want %v", step, name, pop, err, want)
			}
			if h.version == 1 {
				if listed, err := gr.listedProcs(); err != nil || listed != want {
					t.Errorf("%s: %s cgroup.procs listing = %v, %v; want %v", step, name, listed, err, want)
				}
			}
		}
	}
	check("empty", false)
	gc := startGated(t, "/bin/true")
	if err := c.Add(gc.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	check("running", true)
	if _, err := io.WriteString(gc.gate, "go\n"); err != nil {
		t.Fatal(err)
	}
	var info unix.Siginfo // exited, not reaped: pids.current still counts it
	if err := unix.Waitid(unix.P_PID, gc.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	check("zombie", false)
	gc.wait(t)
	check("reaped", false)
}

// An accounting child has directories of its own only where Stats reads per-group numbers (v1: memory,
// pids, cpuacct); in the other hierarchies its processes are in the run group. It measures, kills what it
// lists, and its removal leaves the run group whole.
func TestAccountingChild(t *testing.T) {
	h := requireHost(t)
	run := newTestGroup(t, h, Limits{Memory: 256 << 20, Pids: 64})
	c, err := run.NewAccountingChild("block-1")
	if err != nil {
		t.Fatal(err)
	}
	for i, hr := range h.hiers {
		measured := slices.ContainsFunc(hr.ctrls, func(s string) bool { return s == "memory" || s == "pids" || s == "cpuacct" })
		_, statErr := os.Stat(run.dirs[i] + "/block-1")
		switch {
		case h.version == 2 || measured:
			if c.dirs[i] == "" || statErr != nil {
				t.Errorf("hierarchy %v: want a directory of the child's own (%q): %v", hr.ctrls, c.dirs[i], statErr)
			}
		default:
			if c.dirs[i] != "" || statErr == nil {
				t.Errorf("hierarchy %v: want none for the child, got %q (stat %v)", hr.ctrls, c.dirs[i], statErr)
			}
		}
	}
	if h.version == 1 && !c.Accounting() && len(h.hiers) > 3 {
		t.Errorf("a v1 host with %d hierarchies gave a child with every directory", len(h.hiers))
	}
	gc := startGated(t, "sh", "-c", "while :; do :; done")
	if err := c.Add(gc.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// In /proc/<pid>/cgroup: the child's path where it has a directory, the run's elsewhere.
	for i, hr := range h.hiers {
		want := c.rels[i]
		if want == "" {
			want = run.rels[i]
		}
		if got := cgroupOf(t, gc.cmd.Process.Pid, hr); got != want {
			t.Errorf("hierarchy %v: process in %q, want %q", hr.ctrls, got, want)
		}
	}
	if pop, err := c.Populated(); err != nil || !pop {
		t.Errorf("Populated = %v, %v with a member", pop, err)
	}
	if _, err := io.WriteString(gc.gate, "go\n"); err != nil { // spin, so the child has CPU to report
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if st, _ := gc.wait(t); st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("member after Kill: %v, want SIGKILL", st)
	}
	if err := c.WaitEmpty(DefaultWait); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Stats(); err != nil || s.CPU <= 0 {
		t.Errorf("child stats %+v, %v: want the member's CPU", s, err)
	}
	if err := c.Remove(); err != nil {
		t.Fatal(err)
	}
	for i := range h.hiers {
		if _, err := os.Stat(run.dirs[i]); err != nil {
			t.Errorf("run group's %s removed with its accounting child: %v", run.dirs[i], err)
		}
	}
	if err := run.SetCPUWeight(2); err != nil {
		t.Errorf("run group after the child's removal: %v", err)
	}
}

// cgroupOf is pid's cgroup path in hierarchy hr (/proc/<pid>/cgroup): by
// the hierarchy's id, which is 0 for the unified one (cgroup v2, whose
// hier lists its enabled controllers but whose line names none).
func cgroupOf(t *testing.T, pid int, hr hier) string {
	t.Helper()
	for _, l := range readLines("/proc/" + strconv.Itoa(pid) + "/cgroup") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && parts[0] == strconv.Itoa(hr.id) {
			return parts[2]
		}
	}
	t.Fatalf("pid %d: no line for %v", pid, hr.ctrls)
	return ""
}
