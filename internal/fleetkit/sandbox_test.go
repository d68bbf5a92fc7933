package fleetkit_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/fleetkit"
	"github.com/codellm/codellm/internal/sandbox"
)

// TestMain lets the test binary act as the sandbox helper and checks for leaked goroutines.
func TestMain(m *testing.M) {
	sandbox.Main()
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"))
}

// runPython runs code with python3 in a native sandbox whose Config.Shared is shared.
func runPython(t *testing.T, shared, code string) (string, string, int) {
	t.Helper()
	if rep := sandbox.Probe(sandbox.Config{Mode: sandbox.ModeNative}); !rep.Ready {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("native sandbox unavailable: %v", rep.Missing)
		}
		t.Skipf("native sandbox unavailable: %v", rep.Missing)
	}
	sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeNative, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	dir := filepath.Join(t.TempDir(), "block")
	os.Mkdir(dir, 0o700)
	os.Mkdir(filepath.Join(dir, "tmp"), 0o700)
	run, err := sb.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	var so, se bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&so, outR) }()
	go func() { defer wg.Done(); io.Copy(&se, errR) }()
	p, err := run.Start(sandbox.Spec{Path: "/usr/bin/python3", Args: []string{"python3", "-c", code}, Dir: dir,
		Env:    []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir + "/tmp", "PYTHONPATH=/codellm/python"},
		Stdout: outW, Stderr: errW})
	outW.Close()
	errW.Close()
	if err != nil {
		t.Fatal(err)
	}
	res := p.Wait()
	wg.Wait()
	outR.Close()
	errR.Close()
	return so.String(), se.String(), res.ExitCode
}

// Differential: with the shared tree a block imports fleetkit from /codellm and cannot change it; without
// it the same block fails to import.
func TestBlocksImportFleetkitReadOnly(t *testing.T) {
	dir, err := fleetkit.Materialise("")
	if err != nil {
		t.Fatal(err)
	}
	const probe = `import fleetkit, os, errno
print(fleetkit.__file__)
for target in (fleetkit.__file__, "/codellm/python/evil.py"):
    try:
        open(target, "a").write("x")
        print("WROTE", target)
    except OSError as e:
        print("denied", errno.errorcode[e.errno])
try:
    os.chmod(fleetkit.__file__, 0o666)
    print("CHMOD")
except OSError as e:
    print("denied", errno.errorcode[e.errno])`
	out, stderr, code := runPython(t, dir, probe)
	if code != 0 || !strings.HasPrefix(out, "/codellm/python/fleetkit.py\n") || strings.Contains(out, "WROTE") ||
		strings.Contains(out, "CHMOD") || strings.Count(out, "denied") != 3 {
		t.Fatalf("with the shared tree: exit %v\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	_, stderr, code = runPython(t, "", "import fleetkit")
	if code == 0 || !strings.Contains(stderr, "No module named 'fleetkit'") {
		t.Fatalf("without the shared tree: exit %v: %s", code, stderr)
	}
}
