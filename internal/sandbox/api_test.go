package sandbox

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeNative, "native": ModeNative, "besteffort": ModeBestEffort, "off": ModeOff} {
		got, err := ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseMode("Native"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParseMode(Native) err = %v, want ErrInvalidConfig", err)
	}
}

func TestNewRejectsBadLimits(t *testing.T) {
	for _, l := range []Limits{{Memory: -1}, {Memory: 1 << 20}, {Pids: -1}, {CPUTime: time.Millisecond}, {OpenFiles: 3}, {TmpSize: -5}} {
		if _, err := New(Config{Mode: ModeOff, Limits: l}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) err = %v, want ErrInvalidConfig", l, err)
		}
	}
	if _, err := New(Config{Mode: "strict"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("unknown mode accepted: %v", err)
	}
}

func TestDefaultsFilled(t *testing.T) {
	s := sandboxFor(t, ModeOff, false)
	if got := s.Config().Limits; got != DefaultLimits() {
		t.Fatalf("defaults = %+v, want %+v", got, DefaultLimits())
	}
	r, err := s.NewRun(&Limits{Pids: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := r.Limits(); got.Pids != 7 || got.Memory != DefaultMemory {
		t.Fatalf("run limits = %+v", got)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{512 << 20: "512 MiB", 1 << 30: "1 GiB", 1536 << 10: "1536 KiB", 1000: "1000 bytes"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestUnavailableErrorIs(t *testing.T) {
	var err error = &UnavailableError{Mechanism: "seccomp", Reason: "cannot install filter: EINVAL", Fix: "x"}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatal("errors.Is(UnavailableError, ErrUnavailable) = false")
	}
	if got := err.Error(); got != "seccomp: cannot install filter: EINVAL (fix: x)" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestInvalidSpec(t *testing.T) {
	s := sandboxFor(t, ModeOff, false)
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dir := workdir(t, nil)
	out, _ := os.Open(os.DevNull)
	defer out.Close()
	for name, sp := range map[string]Spec{
		"relative path": {Path: "true", Args: []string{"true"}, Dir: dir, Stdout: out, Stderr: out},
		"no argv":       {Path: "/bin/true", Dir: dir, Stdout: out, Stderr: out},
		"no stdout":     {Path: "/bin/true", Args: []string{"true"}, Dir: dir, Stderr: out},
		"missing dir":   {Path: "/bin/true", Args: []string{"true"}, Dir: dir + "/nope", Stdout: out, Stderr: out},
		"bad env":       {Path: "/bin/true", Args: []string{"true"}, Env: []string{"NOEQUALS"}, Dir: dir, Stdout: out, Stderr: out},
		"nul in arg":    {Path: "/bin/true", Args: []string{"true", "a\x00b"}, Dir: dir, Stdout: out, Stderr: out},
	} {
		if _, err := r.Start(sp); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", name, err)
		}
	}
}

// modes lists the modes every behavioural test runs under: off always,
// native when the host has it.
func modes(t *testing.T) map[Mode]*Sandbox {
	m := map[Mode]*Sandbox{ModeOff: sandboxFor(t, ModeOff, false)}
	if s := sandboxFor(t, ModeNative, false); s.Report().Ready {
		m[ModeNative] = s
	} else if requireSandbox() {
		t.Fatalf("CODELLM_REQUIRE_SANDBOX=1 but native sandbox missing: %v", s.Report().Missing)
	}
	return m
}

func TestExitCodesAndSignals(t *testing.T) {
	for mode, s := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			o := mustRun(t, s, sh("echo out; echo err >&2; exit 7")...)
			if o.ExitCode != 7 || o.Signal != 0 || o.Stdout != "out\n" || o.Stderr != "err\n" {
				t.Fatalf("got %+v", o)
			}
			// A signal the program sends itself: sh is not PID 1 here, the
			// shell's child is (exec), so raise it from a subprocess.
			o = mustRun(t, s, sh("sleep 30 & kill -SEGV $!; wait $!; exit $?")...)
			if o.ExitCode != 128+int(syscall.SIGSEGV) {
				t.Fatalf("wait status of killed child: %+v", o)
			}
			// A fault is delivered by the kernel, so it ends even a PID-1
			// block; a signal the block sends itself would not (see doc.go).
			o = mustRun(t, s, "/usr/bin/python3", "-c", "import ctypes; ctypes.string_at(0)")
			if o.Signal != syscall.SIGSEGV || o.ExitCode != -1 {
				t.Fatalf("segfault: %+v", o)
			}
			if o.Wall <= 0 {
				t.Fatalf("wall time not measured: %+v", o)
			}
		})
	}
}

func TestCPUAndMemoryReported(t *testing.T) {
	for mode, s := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			o := mustRun(t, s, "/usr/bin/python3", "-c", "b = bytearray(64<<20)\nfor i in range(0, len(b), 4096): b[i] = 1\nx = 0\nfor i in range(3000000): x += i")
			if o.ExitCode != 0 {
				t.Fatalf("python failed: %+v", o)
			}
			if o.CPU < 50*time.Millisecond {
				t.Errorf("CPU = %v, want a busy loop's worth", o.CPU)
			}
			if o.MaxRSS < 64<<20 {
				t.Errorf("MaxRSS = %d, want >= 64 MiB", o.MaxRSS)
			}
		})
	}
}

func TestStdinIsEmpty(t *testing.T) {
	for mode, s := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			o := mustRun(t, s, "/bin/cat")
			if o.ExitCode != 0 || o.Stdout != "" {
				t.Fatalf("cat with nil stdin: %+v", o)
			}
		})
	}
}

func TestEnvironmentIsExactlyTheSpec(t *testing.T) {
	os.Setenv("CODELLM_API_KEY", "secret-should-not-leak")
	defer os.Unsetenv("CODELLM_API_KEY")
	for mode, s := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			dir := workdir(t, nil)
			o, err := runIn(t, s, dir, nil, "/usr/bin/env")
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSpace(o.Stdout), "\n")
			want := stdEnv(dir)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("env = %q, want %q", got, want)
			}
		})
	}
}

// TestKillEndsDescendants: Kill ends the block and what it spawned, and
// Wait returns (B: daemonised children do not survive).
func TestKillEndsDescendants(t *testing.T) {
	for mode, s := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			dir := workdir(t, nil)
			r, err := s.NewRun(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			outR, outW, _ := os.Pipe()
			defer outR.Close()
			p, err := r.Start(Spec{Path: "/bin/sh", Args: []string{"sh", "-c", "(sleep 300 &) ; echo started; sleep 300"},
				Env: stdEnv(dir), Dir: dir, Stdout: outW, Stderr: outW})
			outW.Close()
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			n, _ := outR.Read(buf)
			if !strings.Contains(string(buf[:n]), "started") {
				t.Fatalf("block did not start: %q", buf[:n])
			}
			p.Kill()
			done := make(chan Result, 1)
			go func() { done <- p.Wait() }()
			select {
			case res := <-done:
				if res.Signal != syscall.SIGKILL {
					t.Fatalf("result %+v, want SIGKILL", res)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Wait did not return after Kill")
			}
		})
	}
}

func TestRunCloseIdempotentAndFinal(t *testing.T) {
	s := sandboxFor(t, ModeOff, false)
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	out, _ := os.Open(os.DevNull)
	defer out.Close()
	if _, err := r.Start(Spec{Path: "/bin/true", Args: []string{"true"}, Dir: workdir(t, nil), Stdout: out, Stderr: out}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}
