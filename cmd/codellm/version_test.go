package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	info := func(main string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Version: main}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, c := range []struct {
		stamped string
		info    func() (*debug.BuildInfo, bool)
		want    string
	}{
		{"v1.2.3", info("v9.9.9"), "v1.2.3"}, // make release's -X wins
		{"", info("v1.4.0"), "v1.4.0"},       // go install …@v1.4.0
		{"", info("v0.0.0-20260101000000-0123456789ab"), "v0.0.0-20260101000000-0123456789ab"},
		{"", info("(devel)", "vcs.revision", "0123456789abcdef0123", "vcs.modified", "true"), "dev-0123456789ab+dirty"},
		{"", info("(devel)", "vcs.revision", "0123456789abcdef0123", "vcs.modified", "false"), "dev-0123456789ab"},
		{"", info("(devel)"), "dev"},
		{"", none, "dev"},
	} {
		if got := versionOf(c.stamped, c.info); got != c.want {
			t.Errorf("versionOf(%q, …) = %q, want %q", c.stamped, got, c.want)
		}
	}
}

// A cgo build cannot confine every thread of a block's init (no syscall.AllThreadsSyscall), and ran the
// native sandbox anyway, weaker and silently: `go install` without CGO_ENABLED=0 gave such a binary
// wherever gcc was installed. It now refuses (exit 6, naming the fix); the static build runs the same
// body.
func TestCgoBuildRefusesNative(t *testing.T) {
	requireNative(t)
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed: no cgo build to try")
	}
	dir := t.TempDir()
	cgoBin := filepath.Join(dir, "codellm-cgo")
	build := exec.Command("go", "build", "-o", cgoBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cgo build: %v\n%s", err, out)
	}
	body := filepath.Join(dir, "role.md")
	os.WriteFile(body, []byte("```bash\necho '{\"answer\":\"ran\"}'\n```\n"), 0o644)
	cmd := exec.Command(cgoBin, "run", body)
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 6 || !strings.Contains(string(out), "built with cgo") ||
		!strings.Contains(string(out), "CGO_ENABLED=0") || strings.Contains(string(out), "ran") {
		t.Fatalf("cgo build, native: exit %d\n%s", code, out)
	}
	if out, _ := exec.Command(cgoBin, "version").Output(); !strings.Contains(string(out), "cgo: the native sandbox refuses") {
		t.Errorf("cgo build's version: %s", out)
	}
	out, err := exec.Command(binary(t), "run", body).Output()
	if err != nil || !strings.Contains(string(out), `{\"answer\":\"ran\"}`) {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	if out, _ := exec.Command(binary(t), "version").Output(); !strings.Contains(string(out), "static") {
		t.Errorf("static build's version: %s", out)
	}
}
