package sandbox

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// prestartSandbox is a native Sandbox with pre-started helpers, closed
// (pool drained) when the test ends.
func prestartSandbox(t *testing.T) *Sandbox {
	t.Helper()
	nativeSandbox(t)                                                               // skips (or fails under CODELLM_REQUIRE_SANDBOX=1) where native cannot run
	s, err := New(Config{Mode: ModeNative, PrestartHelpers: true, GoHelper: true}) // pre-started helpers are Go helpers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if s.plat.cg == nil {
		skipOrFail(t, "no usable cgroups: pre-started helpers ride on pooled run groups")
	}
	return s
}

// pooledRun is a new run that carries an idle helper (the pool is refilled
// first, so one is waiting).
func pooledRun(t *testing.T, s *Sandbox) (*Run, *idleHelper) {
	t.Helper()
	s.Settle()
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	h := r.plat.helper.Load()
	if h == nil {
		r.Close()
		t.Fatal("a run from the refilled pool has no pre-started helper")
	}
	return r, h
}

// startBlock starts argv as the run's next block with stdin as its input
// and returns its outcome.
func startBlock(t *testing.T, r *Run, stdin string, argv ...string) (outcome, int) {
	t.Helper()
	dir := workdir(t, map[string]string{"in.txt": "from the workdir"})
	inR, inW, _ := os.Pipe()
	go func() { inW.WriteString(stdin); inW.Close() }()
	defer inR.Close()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	p, err := r.Start(Spec{Path: argv[0], Args: argv, Env: stdEnv(dir), Dir: dir, Stdin: inR, Stdout: outW, Stderr: errW})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		t.Fatalf("Start: %v", err)
	}
	so, se := readAllString(outR), readAllString(errR)
	res := p.Wait()
	return outcome{Result: res, Stdout: so, Stderr: se}, p.Pid()
}

func readAllString(f *os.File) string {
	defer f.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

// A pre-started helper serves exactly its run's first block, with that
// block's stdio and workdir, and every confinement applied after the
// hand-over: the block is the helper (same pid), confined like any other.
func TestPrestartedHelperServesFirstBlock(t *testing.T) {
	s := prestartSandbox(t)
	r, h := pooledRun(t, s)
	defer r.Close()
	if s.plat.use.has(mRootFS) && !h.prebuilt {
		t.Fatal("the pre-started helper did not build its root's block-independent part")
	}
	script := `cat; echo; cat in.txt; echo err >&2
grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status | tr -s '\t ' ' '
id -u; [ "$(awk -F: -v u="$(id -u)" '$3 == u {print $6}' /etc/passwd)" = "$PWD" ] && echo home-is-workdir; exit 3`
	o, pid := startBlock(t, r, "from stdin", sh(script)...)
	if pid != h.osp.Pid {
		t.Fatalf("block pid %d, the pre-started helper was %d: not used", pid, h.osp.Pid)
	}
	if o.ExitCode != 3 || o.Stderr != "err\n" {
		t.Fatalf("exit %d stderr %q, want 3 and %q (stdout %q)", o.ExitCode, o.Stderr, "err\n", o.Stdout)
	}
	for _, want := range []string{"from stdin\nfrom the workdir", "Seccomp: 2\n", "NoNewPrivs: 1\n",
		"CapEff: 0000000000000000\n", "\n" + strconv.Itoa(sandboxUID) + "\n", "home-is-workdir\n"} {
		if !strings.Contains(o.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, o.Stdout)
		}
	}
	// The second block of the run gets a helper of its own, started for it.
	o2, pid2 := startBlock(t, r, "", sh("echo second")...)
	if o2.ExitCode != 0 || o2.Stdout != "second\n" || pid2 == pid {
		t.Fatalf("second block: %+v pid %d (first %d)", o2, pid2, pid)
	}
}

// A pre-started helper switches into its prepared root while it waits, so
// that detaching the host's root (an RCU grace period) is not on its
// block's path; the block still finds the root read-only and its own
// /etc/passwd and workdir in it. Before the change the idle helper's mount
// table still held the host's root until its block arrived.
func TestPrestartedHelperEntersItsRootAhead(t *testing.T) {
	s := prestartSandbox(t)
	if !s.plat.use.has(mRootFS) {
		t.Skip("no private root on this host")
	}
	r, h := pooledRun(t, s)
	defer r.Close()
	if !h.prebuilt {
		t.Fatal("the pre-started helper did not build its root's block-independent part")
	}
	// The helper prepares its root right after its start; wait for it (a bound, not a measurement).
	var root string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mi, err := os.ReadFile("/proc/" + strconv.Itoa(h.osp.Pid) + "/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		root = rootMount(string(mi))
		if strings.HasPrefix(root, "tmpfs ") || time.Now().After(deadline) {
			if n := strings.Count(string(mi), "\n"); n > 40 {
				t.Errorf("the idle helper's mount table has %d entries, the host's among them:\n%s", n, mi)
			}
			break
		}
	}
	if !strings.HasPrefix(root, "tmpfs ") {
		t.Fatalf("the idle helper's root is %q, want its prepared tmpfs", root)
	}
	script := `touch /x 2>&1 | grep -q 'Read-only' && echo root-ro
[ "$(awk -F: -v u="$(id -u)" '$3 == u {print $6}' /etc/passwd)" = "$PWD" ] && echo home-is-workdir
echo w > out.txt && cat out.txt`
	o, pid := startBlock(t, r, "", sh(script)...)
	if pid != h.osp.Pid {
		t.Fatalf("block pid %d, the pre-started helper was %d: not used", pid, h.osp.Pid)
	}
	if o.ExitCode != 0 || o.Stdout != "root-ro\nhome-is-workdir\nw\n" {
		t.Fatalf("exit %d stdout %q stderr %q", o.ExitCode, o.Stdout, o.Stderr)
	}
}

// rootMount is "fstype source" of the mount at "/" in a mountinfo text
// (the last one: a later mount stacks over an earlier).
func rootMount(mountinfo string) string {
	var root string
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != "/" {
			continue
		}
		if i := slices.Index(f, "-"); i > 0 && i+2 < len(f) {
			root = f[i+1] + " " + f[i+2]
		}
	}
	return root
}

// Each pre-started helper has namespaces of its own: two blocks served by
// two of them share none with each other or with the server.
func TestPrestartedHelpersHaveFreshNamespaces(t *testing.T) {
	s := prestartSandbox(t)
	nsList := []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"}
	// Each block prints its namespaces and then waits for its stdin to close, so that both are alive
	// while they are compared: a namespace's inode number is reused once it is freed.
	script := "for n in " + strings.Join(nsList, " ") + "; do readlink /proc/self/ns/$n; done; echo end; cat >/dev/null"
	seen := map[string]string{}
	for _, n := range nsList {
		l, err := os.Readlink("/proc/self/ns/" + n)
		if err != nil {
			t.Fatal(err)
		}
		seen[l] = "the server"
	}
	for i := range 2 {
		r, _ := pooledRun(t, s)
		defer r.Close()
		links, stop := startWaitingBlock(t, r, sh(script))
		defer stop()
		if len(links) != len(nsList) {
			t.Fatalf("block %d printed %q", i, links)
		}
		for _, l := range links {
			if who, dup := seen[l]; dup {
				t.Errorf("block %d shares %s with %s", i, l, who)
			}
			seen[l] = "block " + strconv.Itoa(i)
		}
	}
}

// startWaitingBlock starts argv as r's next block, reads its stdout lines up to "end" and returns them
// with a func that closes the block's stdin and checks it then exits 0.
func startWaitingBlock(t *testing.T, r *Run, argv []string) ([]string, func()) {
	t.Helper()
	dir := workdir(t, nil)
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	p, err := r.Start(Spec{Path: argv[0], Args: argv, Env: stdEnv(dir), Dir: dir, Stdin: inR, Stdout: outW, Stderr: null})
	inR.Close()
	outW.Close()
	null.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatalf("Start: %v", err)
	}
	var lines []string
	sc := bufio.NewScanner(outR)
	for sc.Scan() && sc.Text() != "end" {
		lines = append(lines, sc.Text())
	}
	return lines, func() {
		inW.Close()
		res := p.Wait()
		outR.Close()
		if res.ExitCode != 0 {
			t.Errorf("block: %+v", res)
		}
	}
}

// A pre-started helper that does not fit the first block (here: deterministic
// mode keeps CAP_SYS_TIME into its setup), that died while it waited, or whose
// run never starts a block is killed and reaped; the block gets a helper
// started for it. Close leaves no helper, no pooled group and no descriptor.
func TestPrestartedHelpersNeverLeak(t *testing.T) {
	// The package's shared sandbox (nativeSandbox, made on first use) holds descriptors for the whole
	// test binary; make it before counting, so the count sees only what this Sandbox adds.
	nativeSandbox(t)
	fdsBefore := countOpenFDs(t)
	s := prestartSandbox(t)

	r, h := pooledRun(t, s)
	_ = syscall.Kill(h.osp.Pid, syscall.SIGKILL) // died while waiting
	waitZombie(t, h.osp.Pid)
	o, pid := startBlock(t, r, "", sh("echo cold")...)
	if o.ExitCode != 0 || o.Stdout != "cold\n" || pid == h.osp.Pid {
		t.Fatalf("after the idle helper died: %+v pid %d", o, pid)
	}
	r.Close()

	r, h = pooledRun(t, s)
	dir := workdir(t, nil)
	null, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	p, err := r.Start(Spec{Path: "/bin/true", Args: []string{"true"}, Env: stdEnv(dir), Dir: dir, Stdout: null, Stderr: null,
		Deterministic: &Determinism{Seed: "x", Now: time.Unix(0, 0)}})
	if err != nil {
		t.Fatalf("deterministic block: %v", err)
	}
	if res := p.Wait(); res.ExitCode != 0 || p.Pid() == h.osp.Pid {
		t.Fatalf("deterministic block: %+v pid %d, idle helper %d", res, p.Pid(), h.osp.Pid)
	}
	r.Close()
	null.Close()

	r, h = pooledRun(t, s)
	groupDir := r.plat.group.Path()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(h.osp.Pid, 0); err != syscall.ESRCH { // killed and reaped by Close
		t.Errorf("the idle helper %d of a run that started no block outlived its Close (kill 0: %v)", h.osp.Pid, err)
	}
	s.Settle()
	if _, err := os.Stat(groupDir); !os.IsNotExist(err) {
		t.Errorf("closed run's group %s: %v", groupDir, err)
	}

	s.Settle()
	var pooled []string
	for _, pg := range s.plat.pool.ready {
		pooled = append(pooled, pg.run.Path())
	}
	if len(pooled) == 0 {
		t.Fatal("no pooled groups to drain")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if kids := leftChildren(t); len(kids) > 0 {
		t.Errorf("processes left after Close: %s", describePIDs(kids))
	}
	for _, g := range pooled {
		if _, err := os.Stat(g); !os.IsNotExist(err) {
			t.Errorf("pooled group %s left after Close: %v", filepath.Base(g), err)
		}
	}
	if n := countOpenFDs(t); n > fdsBefore+1 { // +1: the sealed helper binary, kept for the Sandbox's life
		ents, _ := os.ReadDir("/proc/self/fd")
		var l []string
		for _, e := range ents {
			d, _ := os.Readlink("/proc/self/fd/" + e.Name())
			l = append(l, e.Name()+"="+d)
		}
		t.Errorf("descriptors: %d before New, %d after Close: %v", fdsBefore, n, l)
	}
}

func countOpenFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the ReadDir's own
}

// waitZombie waits until pid has exited (without reaping it).
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	for range 5000 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("pid %d did not exit after SIGKILL", pid)
}

// Concurrent runs take pooled groups (with their helpers) and refill the
// pool while others run; every block gets its own output, and Close leaves
// no process behind.
func TestPrestartedHelpersUnderConcurrency(t *testing.T) {
	s := prestartSandbox(t)
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3 {
				want := "block " + strconv.Itoa(g) + "." + strconv.Itoa(i)
				o, err := runIn(t, s, "", nil, sh("echo "+want)...)
				if err != nil || o.ExitCode != 0 || o.Stdout != want+"\n" {
					errs <- want + ": " + o.Stdout + " " + errString(err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if kids := leftChildren(t); len(kids) > 0 {
		t.Errorf("processes left after Close: %s", describePIDs(kids))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// A prebuilt root takes the block's workdir afterwards, persistent (bound,
// writes reach the host) or copied, at its MountAt path.
func TestPrestartedHelperPersistAndMountAt(t *testing.T) {
	s := prestartSandbox(t)
	for _, persist := range []bool{true, false} {
		r, h := pooledRun(t, s)
		dir := workdir(t, map[string]string{"in.txt": "data"})
		out, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.Start(Spec{Path: "/bin/sh", Args: sh("pwd; cat in.txt; echo written > out.txt"), Env: stdEnv("/mnt/work"),
			Dir: dir, MountAt: "/mnt/work", Persist: persist, Stdout: out, Stderr: out})
		if err != nil {
			t.Fatalf("persist %v: %v", persist, err)
		}
		res := p.Wait()
		r.Close()
		b, _ := os.ReadFile(out.Name())
		out.Close()
		if res.ExitCode != 0 || string(b) != "/mnt/work\ndata" || p.Pid() != h.osp.Pid {
			t.Fatalf("persist %v: %+v %q (pid %d, pre-started %d)", persist, res, b, p.Pid(), h.osp.Pid)
		}
		_, statErr := os.Stat(dir + "/out.txt")
		if persist != (statErr == nil) {
			t.Errorf("persist %v: out.txt on the host: %v", persist, statErr)
		}
	}
}
