package sandbox

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// requireSandbox is CODELLM_REQUIRE_SANDBOX=1: a test that would skip
// because the host lacks a mechanism fails instead (.ci/run sets it).
func requireSandbox() bool { return os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" }

// skipOrFail skips with a message naming the missing mechanism, or fails
// under CODELLM_REQUIRE_SANDBOX=1.
func skipOrFail(t testing.TB, format string, a ...any) {
	t.Helper()
	if requireSandbox() {
		t.Fatalf("CODELLM_REQUIRE_SANDBOX=1 but: "+format, a...)
	}
	t.Skipf(format, a...)
}

var (
	sbMu    sync.Mutex
	sbCache = map[string]*Sandbox{}
)

// sandboxFor returns a shared Sandbox per mode/network (probing once).
func sandboxFor(t testing.TB, mode Mode, network bool) *Sandbox {
	t.Helper()
	key := string(mode) + "/" + map[bool]string{true: "net", false: "nonet"}[network]
	sbMu.Lock()
	defer sbMu.Unlock()
	if s, ok := sbCache[key]; ok {
		return s
	}
	s, err := New(Config{Mode: mode, Network: network})
	if err != nil {
		t.Fatalf("New(%s): %v", mode, err)
	}
	sbCache[key] = s
	return s
}

// nativeSandbox returns the native sandbox or skips (fails under
// CODELLM_REQUIRE_SANDBOX=1) when the host cannot run it.
func nativeSandbox(t testing.TB) *Sandbox {
	t.Helper()
	s := sandboxFor(t, ModeNative, false)
	if rep := s.Report(); !rep.Ready {
		skipOrFail(t, "host cannot run the native sandbox; missing: %s", strings.Join(rep.Missing, ", "))
	}
	return s
}

type outcome struct {
	Result
	Stdout, Stderr string
}

// workdir creates a fresh block workdir the way the pipeline does: 0700,
// holding the given files and an empty tmp/.
func workdir(t testing.TB, files map[string]string) string {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "block")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func stdEnv(dir string) []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir + "/tmp", "LANG=C.UTF-8"}
}

// run runs argv in s with a fresh workdir (or dir if given) and returns its
// outcome; it fails the test on a start error unless wantStartErr.
func runIn(t testing.TB, s *Sandbox, dir string, lim *Limits, argv ...string) (outcome, error) {
	t.Helper()
	if dir == "" {
		dir = workdir(t, nil)
	}
	r, err := s.NewRun(lim)
	if err != nil {
		t.Fatalf("NewRun: %v", err)
	}
	defer r.Close()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	var wg sync.WaitGroup
	var so, se bytes.Buffer
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&so, io.LimitReader(outR, 1<<20)); io.Copy(io.Discard, outR) }()
	go func() { defer wg.Done(); io.Copy(&se, io.LimitReader(errR, 1<<20)); io.Copy(io.Discard, errR) }()
	p, err := r.Start(Spec{Path: argv[0], Args: argv, Env: stdEnv(dir), Dir: dir, Stdout: outW, Stderr: errW})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		wg.Wait()
		return outcome{}, err
	}
	timer := time.AfterFunc(60*time.Second, func() { p.Kill() }) // hang detector only
	res := p.Wait()
	timer.Stop()
	wg.Wait()
	outR.Close()
	errR.Close()
	return outcome{Result: res, Stdout: so.String(), Stderr: se.String()}, nil
}

func mustRun(t testing.TB, s *Sandbox, argv ...string) outcome {
	t.Helper()
	o, err := runIn(t, s, "", nil, argv...)
	if err != nil {
		t.Fatalf("Start %v: %v", argv, err)
	}
	return o
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// startOutput starts sp in r with its stdout and stderr on one pipe, waits
// for it and returns what it wrote; a start error fails the test.
func startOutput(t testing.TB, r *Run, sp Spec) string {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	sp.Stdout, sp.Stderr = outW, outW
	p, err := r.Start(sp)
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(outR)
	p.Wait()
	return out.String()
}
