package sandbox

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/sandbox/hook"
)

// deterministicBodies runs the python, node and bash bodies of
// testdata/determinism in one run each and returns their outputs joined.
func deterministicBodies(t *testing.T, s *Sandbox, d *Determinism) string {
	t.Helper()
	var all strings.Builder
	for _, b := range []struct{ file, interp string }{
		{"body.py", "/usr/bin/python3"}, {"body.js", "/usr/bin/node"}, {"body.sh", "/bin/bash"},
	} {
		src, err := os.ReadFile(filepath.Join("testdata", "determinism", b.file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(b.interp); err != nil {
			skipOrFail(t, "%s not installed", b.interp)
		}
		dir := workdir(t, map[string]string{b.file: string(src)})
		r, err := s.NewRun(nil)
		if err != nil {
			t.Fatal(err)
		}
		in := r.Workdir(dir, "/mnt/data")
		outR, outW, _ := os.Pipe()
		p, err := r.Start(Spec{Path: b.interp, Args: []string{filepath.Base(b.interp), in + "/" + b.file},
			Env: stdEnv(in), Dir: dir, MountAt: "/mnt/data", Stdout: outW, Stderr: outW, Deterministic: d})
		outW.Close()
		if err != nil {
			outR.Close()
			r.Close()
			t.Fatalf("%s: %v", b.file, err)
		}
		var out bytes.Buffer
		out.ReadFrom(outR)
		outR.Close()
		res := p.Wait()
		r.Close()
		if res.ExitCode != 0 {
			t.Fatalf("%s: exit %d:\n%s", b.file, res.ExitCode, out.String())
		}
		all.WriteString("== " + b.file + "\n" + out.String())
	}
	return all.String()
}

// TestDeterministicBodies is issue 21's acceptance test: the same seed and
// clock give byte-identical output of python, node and bash bodies that
// print clocks, random numbers, UUIDs, hash order, hostname and addresses,
// run twice a second apart; another seed or clock changes it; without the
// mode two runs differ (the differential half).
func TestDeterministicBodies(t *testing.T) {
	s := nativeSandbox(t)
	if missing := determinismMissing(s.plat.want & s.plat.avail); missing != "" {
		skipOrFail(t, "deterministic mode unavailable: %s", missing)
	}
	now := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	d := &Determinism{Seed: "alpha", Now: now}
	first := deterministicBodies(t, s, d)
	time.Sleep(1100 * time.Millisecond)
	second := deterministicBodies(t, s, d)
	if first != second {
		t.Fatalf("same seed and clock, different output:\n%s\n---\n%s", first, second)
	}
	t.Logf("deterministic output:\n%s", first)
	// /dev/urandom and /dev/random are one stream: each open reads on, none repeats another's bytes, and
	// there is no end (a file would give every open the same first bytes, and EOF after its size).
	if f := strings.Fields(first[strings.Index(first, "\nstream ")+1:]); len(f) < 5 || f[1] == f[2] || f[2] == f[4] || f[1] == f[4] || f[3] != "1000000" {
		t.Errorf("the seeded devices are not one endless stream: %q", f[:min(5, len(f))])
	}
	pid := strconv.Itoa(hook.ProgramPID)
	for _, want := range []string{"wall 1704164645", "epoch 1704164645 1704164645.", "monotonic 0", "host codellm", "pid " + pid + " " + pid + "\n", " " + pid + "\n"} {
		if !strings.Contains(first, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Each body on its own: a seed that reached only one program's randomness would hide behind another's.
	// "alpha" and "s1" both have the key's bit 63 set at FAKERANDOM_SEED's place, which libfaketime
	// once read as the same seed (see FakeRandomSeed).
	other := deterministicBodies(t, s, &Determinism{Seed: "s1", Now: now})
	later := deterministicBodies(t, s, &Determinism{Seed: "alpha", Now: now.Add(time.Hour)})
	for i, body := range strings.Split(first, "== ")[1:] {
		if strings.Split(other, "== ")[1+i] == body {
			t.Errorf("another seed gave the same output of %s", body)
		}
		if strings.Split(later, "== ")[1+i] == body {
			t.Errorf("another clock gave the same output of %s", body)
		}
	}
	off1 := deterministicBodies(t, s, nil)
	off2 := deterministicBodies(t, s, nil)
	if off1 == off2 {
		t.Errorf("mode off: two runs gave the same output:\n%s", off1)
	}
}

// TestDeterministicRefusedWithoutMechanism: a platform missing a piece
// refuses the request and names it.
func TestDeterministicRefusedWithoutMechanism(t *testing.T) {
	s := withDisabled(nativeSandbox(t), MechSeccomp)
	_, err := runDet(t, s)
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Mechanism != MechDeterminism || !strings.Contains(ue.Reason, "seccomp") {
		t.Fatalf("got %v, want an UnavailableError naming seccomp", err)
	}
}

// TestDeterministicRefusedWithoutInit: without the sandbox's init there is no PID pin and no feeder for
// /dev/urandom (a FIFO nobody writes would block every open), so the block is refused.
func TestDeterministicRefusedWithoutInit(t *testing.T) {
	_, err := runDet(t, withProgramAsPID1(nativeSandbox(t)))
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Mechanism != MechDeterminism || !strings.Contains(ue.Reason, "init") {
		t.Fatalf("got %v, want an UnavailableError naming the init", err)
	}
}

func runDet(t *testing.T, s *Sandbox) (*Process, error) {
	dir := workdir(t, nil)
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return r.Start(Spec{Path: "/bin/true", Args: []string{"true"}, Dir: dir, Stdout: os.Stderr, Stderr: os.Stderr,
		Deterministic: &Determinism{Seed: "x", Now: time.Unix(0, 0)}})
}

// TestDeterminismReported: doctor's and /readyz's row says the mode is supported on a native host, and
// names the missing piece when a mechanism it needs is off.
func TestDeterminismReported(t *testing.T) {
	s := nativeSandbox(t)
	if st := s.Report().Determinism; !st.Supported || len(st.Mechanisms) == 0 || s.DeterminismMissing() != "" {
		if determinismHost() == "" {
			t.Fatalf("native host, yet determinism = %+v", st)
		}
	}
	use := (s.plat.want & s.plat.avail) &^ mSeccomp
	if st := determinismStatus(use); st.Supported || !strings.Contains(st.Missing, "seccomp") {
		t.Fatalf("without seccomp: %+v", st)
	}
	if !strings.Contains(s.Report().String(), "deterministic mode:") {
		t.Fatal("doctor table lacks the deterministic mode line")
	}
	if st := s.Report().Determinism; len(st.NotCovered) == 0 || !strings.Contains(st.NotCovered[0], "file timestamps") ||
		!strings.Contains(s.Report().String(), "deterministic mode does not cover: file timestamps") {
		t.Fatalf("the report does not say file timestamps are not covered: %+v", st)
	}
}

// TestFakeRandomSeedRange: FAKERANDOM_SEED stays below 2^63 (libfaketime saturates above) and away
// from small values, and differs for the test seeds whose raw key bits would have collided.
func TestFakeRandomSeedRange(t *testing.T) {
	seen := map[uint64]string{}
	for _, seed := range []string{"alpha", "beta", "s1", "s2", "h1", "c1", "c2", ""} {
		d := &Determinism{Seed: seed}
		v := d.FakeRandomSeed()
		if v < 1<<62 || v >= 1<<63 {
			t.Errorf("seed %q: FAKERANDOM_SEED %#x outside [2^62, 2^63)", seed, v)
		}
		if prev, dup := seen[v]; dup {
			t.Errorf("seeds %q and %q share FAKERANDOM_SEED %#x", prev, seed, v)
		}
		seen[v] = seed
	}
}

// detScript runs a bash script in a deterministic block (or not, d nil) and returns its output.
func detScript(t *testing.T, s *Sandbox, d *Determinism, script string) string {
	t.Helper()
	dir := workdir(t, nil)
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := r.Workdir(dir, "/mnt/data")
	outR, outW, _ := os.Pipe()
	p, err := r.Start(Spec{Path: "/bin/bash", Args: []string{"bash", "-c", script}, Env: stdEnv(in), Dir: dir, MountAt: "/mnt/data",
		Stdout: outW, Stderr: outW, Deterministic: d})
	outW.Close()
	if err != nil {
		outR.Close()
		t.Fatal(err)
	}
	var out bytes.Buffer
	out.ReadFrom(outR)
	outR.Close()
	if res := p.Wait(); res.ExitCode != 0 {
		t.Fatalf("exit %d:\n%s", res.ExitCode, out.String())
	}
	return out.String()
}

// TestDeterministicFileTimestamps pins what DeterminismNotCovered says of file timestamps, so that a
// libfaketime that starts wrapping stat64/statx shows up here (and the docs get updated): a file the
// block just wrote has today's mtime for python, node, stat(1) and ls, and the fixed clock (give or take
// the second the shift rounds to) for date -r, which calls libc's stat.
func TestDeterministicFileTimestamps(t *testing.T) {
	s := nativeSandbox(t)
	if missing := determinismMissing(s.plat.want & s.plat.avail); missing != "" {
		skipOrFail(t, "deterministic mode unavailable: %s", missing)
	}
	for _, p := range []string{"/usr/bin/python3", "/usr/bin/node"} {
		if _, err := os.Stat(p); err != nil {
			skipOrFail(t, "%s not installed", p)
		}
	}
	now := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	out := detScript(t, s, &Determinism{Seed: "ts", Now: now}, `echo x > f
echo "python $(python3 -c 'import os; print(int(os.stat("f").st_mtime))')"
echo "node $(node -e 'console.log(Math.floor(require("fs").statSync("f").mtimeMs / 1000))')"
echo "stat $(stat -c %Y f)"
echo "ls $(ls -l --time-style=+%s f | cut -d' ' -f6)"
echo "date-r $(date -r f +%s)"`)
	t.Logf("mtimes of a new file:\n%s", out)
	fixed, real := now.Unix(), time.Now().Unix()
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, v, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		near := func(want int64) bool { return n >= want-5 && n <= want+5 }
		if name == "date-r" && !near(fixed) || name != "date-r" && !near(real) {
			t.Errorf("%s: mtime %d, the docs say %s (fixed %d, real %d)", name, n, map[bool]string{true: "the fixed clock", false: "the real clock"}[name == "date-r"], fixed, real)
		}
	}
}

// nopEgress is an egress proxy that serves nothing (each block's listener is closed at once).
type nopEgress struct{}

func (nopEgress) Serve(l net.Listener) { _ = l.Close() }
func (nopEgress) Close() error         { return nil }

// TestDeterministicRefusedWithNetwork: a deterministic block that could reach a network is refused by
// Start whatever front end asked for it (issue 35 item 6: its TLS keys follow from the seed): full
// network, or an egress proxy with destinations left; a run narrowed to none may be deterministic.
func TestDeterministicRefusedWithNetwork(t *testing.T) {
	nativeSandbox(t)
	if _, err := runDet(t, sandboxFor(t, ModeNative, true)); !errors.Is(err, ErrDeterministicNetwork) {
		t.Errorf("full network: %v, want ErrDeterministicNetwork", err)
	}
	s := nativeSandbox(t)
	eg := &Sandbox{cfg: s.cfg, log: s.log, report: s.report, plat: s.plat}
	eg.cfg.Egress = func(string, []string) (EgressRun, error) { return nopEgress{}, nil }
	if _, err := runDet(t, eg); !errors.Is(err, ErrDeterministicNetwork) {
		t.Errorf("egress proxy: %v, want ErrDeterministicNetwork", err)
	}
	r, err := eg.NewRun(&Limits{NetworkAllow: &[]string{}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := r.Start(Spec{Path: "/bin/true", Args: []string{"true"}, Dir: workdir(t, nil), Stdout: os.Stderr, Stderr: os.Stderr,
		Deterministic: &Determinism{Seed: "x", Now: time.Unix(0, 0)}})
	if err != nil {
		t.Fatalf("deterministic run narrowed to no network: %v", err)
	}
	p.Wait()
}

// The raw helper and the Go helper give a deterministic block the same
// world: the same seed and clock print the same bytes on each (the PID pin,
// the seeded stream, the clocks, the addresses), and the raw helper is the
// init of one and not of the other.
func TestDeterministicHelpersAgree(t *testing.T) {
	s := nativeSandbox(t)
	if missing := determinismMissing(s.plat.want & s.plat.avail); missing != "" {
		skipOrFail(t, "deterministic mode unavailable: %s", missing)
	}
	if goHelperForTests {
		t.Skip("every Sandbox gets the Go helper in this pass")
	}
	goHelper, err := New(Config{Mode: ModeNative, GoHelper: true})
	if err != nil {
		t.Fatal(err)
	}
	defer goHelper.Close()
	d := &Determinism{Seed: "parity", Now: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)}
	if raw, gohelper := deterministicBodies(t, s, d), deterministicBodies(t, goHelper, d); raw != gohelper {
		t.Fatalf("the raw helper printed\n%s\n--- the Go helper\n%s", raw, gohelper)
	}
	inits := map[bool]string{}
	for _, sb := range []*Sandbox{s, goHelper} {
		r, err := sb.NewRun(nil)
		if err != nil {
			t.Fatal(err)
		}
		dir := workdir(t, nil)
		out := startOutput(t, r, Spec{Path: "/bin/cat", Args: []string{"cat", "/proc/1/comm"}, Env: stdEnv(dir), Dir: dir, Deterministic: d})
		r.Close()
		inits[sb == s] = strings.TrimSpace(out)
	}
	if inits[true] != "codellm-raw" || inits[false] == "codellm-raw" {
		t.Errorf("a deterministic block's init is %q (raw helper's Sandbox) and %q (Go helper's)", inits[true], inits[false])
	}
}
