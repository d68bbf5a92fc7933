package sandbox

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// withProgramAsPID1 is s as it was before the init: the program is PID 1.
func withProgramAsPID1(s *Sandbox) *Sandbox {
	c := &Sandbox{cfg: s.cfg, log: s.log, report: s.report, plat: s.plat}
	c.cfg.ProgramAsPID1 = true
	return c
}

// TestInitGivesShellSignalSemantics is differential: each probe ends as in a
// shell with the init, and not without it (the program as PID 1 is immune
// to the signals it sends itself).
func TestInitGivesShellSignalSemantics(t *testing.T) {
	s := nativeSandbox(t)
	old := withProgramAsPID1(s)
	cases := []struct {
		name     string
		argv     []string
		want     syscall.Signal
		oldCode  int // what the program as PID 1 reports instead
		oldMatch bool
	}{
		{"kill -9 $$", sh("kill -9 $$; exit 3"), syscall.SIGKILL, 3, true},
		{"kill -TERM $$", sh("kill -TERM $$; exit 4"), syscall.SIGTERM, 4, true},
		{"os.abort", []string{"/usr/bin/python3", "-c", "import os; os.abort()"}, syscall.SIGABRT, 0, false},
		{"SIGPIPE", sh("trap '' PIPE 2>/dev/null; exec /usr/bin/python3 -c 'import signal,os; signal.signal(signal.SIGPIPE, signal.SIG_DFL); r,w=os.pipe(); os.close(r); os.write(w, b\"x\")'"), syscall.SIGPIPE, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := mustRun(t, s, c.argv...)
			if o.Signal != c.want || o.ExitCode != -1 {
				t.Fatalf("with init: got exit %d signal %v (stderr %q), want signal %v", o.ExitCode, o.Signal, o.Stderr, c.want)
			}
			o = mustRun(t, old, c.argv...)
			if o.Signal == c.want {
				t.Fatalf("program as PID 1: got signal %v too; the probe does not tell the init apart", o.Signal)
			}
			if c.oldMatch && o.ExitCode != c.oldCode {
				t.Fatalf("program as PID 1: got %+v, want exit %d", o.Result, c.oldCode)
			}
		})
	}
}

// TestTerminateReachesProgram: codellm's SIGTERM reaches the program under
// the init (programProcess), which has no handler and dies of it; as PID 1
// the program ignored it.
func TestTerminateReachesProgram(t *testing.T) {
	s := nativeSandbox(t)
	for _, tc := range []struct {
		name string
		sb   *Sandbox
		want syscall.Signal
	}{{"init", s, syscall.SIGTERM}, {"pid1", withProgramAsPID1(s), syscall.SIGKILL}} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.sb.NewRun(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if res, _ := terminateBlock(t, r); res.Signal != tc.want {
				t.Fatalf("got %+v, want signal %v", res, tc.want)
			}
		})
	}
}

// TestTerminateFindsProgramAmongOrphans: codellm picks the program out of
// the init's children by its namespace PID, not by being the only child:
// with an orphan (its own session and process group, like the program's)
// reparented to the init first, Terminate still ends the program, and the
// orphan ends with the block.
func TestTerminateFindsProgramAmongOrphans(t *testing.T) {
	r, err := nativeSandbox(t).NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The orphan is reparented to the init before "up"; the program is then the init's second child.
	p := startUp(t, r, "(setsid sleep 60 >/dev/null 2>&1 &); while [ $(wc -w < /proc/1/task/1/children) -lt 2 ]; do :; done; echo up; exec sleep 60")
	if kids := initChildren(p.Pid()); len(kids) != 2 {
		t.Fatalf("the init has children %v, want the orphan and the program", kids)
	}
	p.Terminate()
	kill := time.AfterFunc(5*time.Second, p.Kill)
	res := p.Wait()
	kill.Stop()
	if res.Signal != syscall.SIGTERM {
		t.Fatalf("got %+v, want the program killed by SIGTERM", res)
	}
}

// TestInitIgnoresSignalsToPID1: the init forwards nothing and ignores what
// the block sends PID 1, as an init without handlers does: the program
// lives on after kill -TERM 1 (which the init used to relay back to it).
func TestInitIgnoresSignalsToPID1(t *testing.T) {
	s := nativeSandbox(t)
	for _, sig := range []string{"TERM", "INT", "HUP", "QUIT", "USR1"} {
		o := mustRun(t, s, sh("kill -"+sig+" 1; sleep 0.2; echo alive")...)
		if o.ExitCode != 0 || strings.TrimSpace(o.Stdout) != "alive" {
			t.Fatalf("kill -%s 1: got %+v (stdout %q, stderr %q), want the program to live on", sig, o.Result, o.Stdout, o.Stderr)
		}
	}
	// What the init catches is reset by the program's exec: none of those signals is ignored or caught
	// in the program. (cat installs no handler of its own; grep catches SIGSEGV. Other signals may be
	// ignored by whatever started the test, which the whole chain inherits.)
	var quieted uint64
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGABRT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM,
		syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGIO, syscall.SIGPWR} {
		quieted |= 1 << (sig - 1)
	}
	o := mustRun(t, s, "/bin/cat", "/proc/self/status")
	for _, field := range []string{"SigIgn", "SigCgt"} {
		_, rest, ok := strings.Cut(o.Stdout, "\n"+field+":\t")
		hex, _, _ := strings.Cut(rest, "\n")
		mask, err := strconv.ParseUint(hex, 16, 64)
		if !ok || err != nil {
			t.Fatalf("no %s in the program's status %q", field, o.Stdout)
		}
		if mask&quieted != 0 {
			t.Fatalf("the program starts with %s %016x: the init's dispositions leaked into it", field, mask&quieted)
		}
	}
}

// terminateBlock starts a shell that reports and then sleeps as r's next
// block, sends it codellm's SIGTERM once it runs, and returns its result
// (SIGKILL after a 2 s grace) and pid.
func terminateBlock(t *testing.T, r *Run) (Result, int) {
	t.Helper()
	p := startSleeper(t, r)
	p.Terminate()
	kill := time.AfterFunc(2*time.Second, p.Kill) // the "grace": only the PID-1 program needs it
	res := p.Wait()
	kill.Stop()
	return res, p.Pid()
}

// TestNothingOutlivesTheProgram: daemonised descendants (setsid, double
// fork) that keep the block's stdout open are gone once Wait returns,
// because the init exits with its program and the kernel ends the
// namespace: stdout reaches EOF at once.
func TestNothingOutlivesTheProgram(t *testing.T) {
	s := nativeSandbox(t)
	dir := workdir(t, nil)
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	script := "(setsid sh -c 'sleep 300 & sleep 300' &); (sleep 300 &); tr '\\0' ' ' < /proc/1/cmdline; echo"
	p, err := r.Start(Spec{Path: "/bin/sh", Args: sh(script), Env: stdEnv(dir), Dir: dir, Stdout: outW, Stderr: outW})
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	res := p.Wait()
	if res.ExitCode != 0 {
		t.Fatalf("got %+v", res)
	}
	_ = outR.SetReadDeadline(time.Now().Add(10 * time.Second))
	out, err := io.ReadAll(outR)
	if err != nil {
		t.Fatalf("stdout still held after Wait (a descendant outlived the block): %v", err)
	}
	// The Go helper's argv, or the raw helper's (a fork of the spawner, whose argv it keeps).
	if !strings.HasPrefix(string(out), "codellm-sandbox ") && !strings.HasPrefix(string(out), "codellm-spawner ") {
		t.Fatalf("PID 1 of the block is %q, want the helper", out)
	}
}

// TestWaitReturnsWithOnlyTheInitLeft: Wait may return before the init has
// exited (its own teardown goes on behind the result), but never before the
// daemons a block left behind are dead: when it returns, the block's cgroup
// holds the init at most. Daemons that hold no pipe of the block would
// otherwise still be running (stdout EOF cannot tell).
func TestWaitReturnsWithOnlyTheInitLeft(t *testing.T) {
	r, err := nativeSandbox(t).NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dir := workdir(t, nil)
	script := "(setsid sleep 300 </dev/null >/dev/null 2>&1 &); sleep 300 </dev/null >/dev/null 2>&1 & " +
		"while [ $(wc -w < /proc/1/task/1/children) -lt 2 ]; do :; done; echo up"
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	p, err := r.Start(Spec{Path: "/bin/sh", Args: sh(script), Env: stdEnv(dir), Dir: dir, Stdout: null, Stderr: null})
	if err != nil {
		t.Fatal(err)
	}
	if res := p.Wait(); res.ExitCode != 0 {
		t.Fatalf("got %+v", res)
	}
	for _, f := range p.plat.group.ProcsFiles() {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // removed: empty
		}
		for _, pid := range strings.Fields(string(b)) {
			if pid != strconv.Itoa(p.Pid()) {
				t.Fatalf("after Wait the block's cgroup (%s) still holds %s besides the init %d: %q", f, pid, p.Pid(), b)
			}
		}
	}
}

// startSleeper starts a shell that says "up" and sleeps for a minute as r's
// next block, and returns once it has said so.
func startSleeper(t *testing.T, r *Run) *Process {
	t.Helper()
	return startUp(t, r, "echo up; exec sleep 60")
}

// startUp starts script as r's next block and returns once it has printed "up".
func startUp(t *testing.T, r *Run, script string) *Process {
	t.Helper()
	dir := workdir(t, nil)
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	p, err := r.Start(Spec{Path: "/bin/sh", Args: sh(script), Env: stdEnv(dir), Dir: dir, Stdout: outW, Stderr: null})
	outW.Close()
	null.Close()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := outR.Read(buf); err != nil || string(buf) != "up\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	return p
}

// Every thread of a block's init is as confined as the one that started the program: no capabilities,
// no_new_privs, seccomp. Before the lockdown ran on every thread (hook.onThreads), five of a Go helper's
// init's seven threads kept CAP_SYS_ADMIN and CAP_SETPCAP of the block's user namespace. A cgo build of
// this test cannot confine the other threads (no AllThreadsSyscall); `make test` builds without cgo, as
// the release binary is.
func TestInitThreadsAreConfined(t *testing.T) {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP {
		skipOrFail(t, "a cgo build: the helper cannot confine its other threads (build with CGO_ENABLED=0)")
	}
	r, err := nativeSandbox(t).NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := startSleeper(t, r)
	defer p.Wait()
	defer p.Kill()
	task := "/proc/" + strconv.Itoa(p.Pid()) + "/task"
	ents, err := os.ReadDir(task)
	// The raw helper has no runtime and so one thread; a Go helper's init has its runtime's too.
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/comm")
	if raw := string(comm) == "codellm-raw\n"; err != nil || len(ents) < 1 || !raw && len(ents) < 2 {
		t.Fatalf("the init's threads (%q): %v %v", comm, ents, err)
	}
	for _, e := range ents {
		b, _ := os.ReadFile(task + "/" + e.Name() + "/status")
		for _, want := range []string{"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
			if !strings.Contains(string(b), want+"\n") {
				t.Errorf("init thread %s lacks %q", e.Name(), want)
			}
		}
	}
}
