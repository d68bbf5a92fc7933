package runner

import (
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/testhelp"
)

const (
	testBound    = 1 << 20
	writeTwice   = "head -c 2097152 /dev/zero > big && echo wrote"
	unprivRunner = "CODELLM_RUNNER_UNPRIV_CHILD"
)

// treeBytes is the sum of the regular files' sizes under dir (what a run left on the host disk).
func treeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// boundedRunner is a runner on sb with WorkspaceSize size, bounded by the sandbox's private tmpfs.
func boundedRunner(t *testing.T, sb *sandbox.Sandbox, size int64) *testRunner {
	return newRunner(t, func(c *Config) { c.Sandbox, c.WorkspaceSize, c.privateWorkspace = sb, size, true })
}

// checkBounded is the private workspace's differential test, as root or not: a one-off run writing twice
// the bound fills the host directory without it and gets ENOSPC inside with it, the host staying tiny.
func checkBounded(t *testing.T, sb *sandbox.Sandbox) {
	plain := newRunner(t, func(c *Config) { c.Sandbox = sb })
	var grown int64
	plain.afterRun = func(string) { grown = treeBytes(t, plain.dir) }
	if resp := plain.exec("", code("bash", writeTwice)); resp.Run.Stdout != "wrote\n" || grown < 2<<20 {
		t.Fatalf("without a bound: %+v, host workspace held %d bytes (want the write to land there)", resp.Run, grown)
	}
	tr := boundedRunner(t, sb, testBound)
	var host int64
	tr.afterRun = func(string) { host = treeBytes(t, tr.dir) }
	resp := tr.exec("", code("bash", writeTwice))
	if resp.Run.Stdout == "wrote\n" || !strings.Contains(resp.Run.Stderr, "No space left") || host > 64<<10 {
		t.Fatalf("bounded one-off run: %+v, host workspace held %d bytes", resp.Run, host)
	}
	// The workdir tmpfs has the workspace's size; /tmp keeps the sandbox's own (64 MiB).
	if out := tr.exec("", code("bash", "df -k . /tmp | awk 'NR>1{print $2}'")).Run.Stdout; out != "1024\n65536\n" {
		t.Fatalf("tmpfs sizes (KiB) of the workdir and /tmp: %q", out)
	}
	if plain.private || !tr.private {
		t.Fatalf("modes: plain private=%v, bounded private=%v", plain.private, tr.private)
	}
	checkFilesOut(t, tr)
	checkSessionCopy(t, tr)
	checkCompiled(t, tr)
	checkTooLarge(t, tr)
}

// checkFilesOut: new and changed files come back, unchanged request files and symlinks (one to the
// host's /etc/passwd) do not, and a run stopped at run_timeout keeps what it wrote.
func checkFilesOut(t *testing.T, tr *testRunner) {
	req := ExecuteRequest{Language: "bash", Version: "*", Files: []File{
		{Name: "main.sh", Content: ptr("echo new > new.txt; echo changed > data.txt; ln -s /etc/passwd link.txt; mkdir -p d; echo deep > d/deep.txt")},
		{Name: "data.txt", Content: ptr("old")}, {Name: "same.txt", Content: ptr("same")}}}
	resp := tr.exec("", req)
	var got []string
	for _, f := range resp.Files {
		got = append(got, f.Name+"="+decoded(t, f))
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "d/deep.txt=deep\n data.txt=changed\n new.txt=new\n" || resp.FilesTruncated {
		t.Fatalf("files out %q (truncated %v), run %+v", got, resp.FilesTruncated, resp.Run)
	}
	req = code("bash", "echo kept > kept.txt; sleep 30")
	req.RunTimeout = ptr(float64(300))
	resp = tr.exec("", req)
	if resp.Run.Status == nil || *resp.Run.Status != StatusTimeout || len(resp.Files) != 1 || resp.Files[0].Name != "kept.txt" {
		t.Fatalf("timed-out run: %+v, files %+v", resp.Run, resp.Files)
	}
}

func decoded(t *testing.T, f OutFile) string {
	t.Helper()
	if f.Content == nil {
		return "<omitted>"
	}
	b, err := base64.StdEncoding.DecodeString(*f.Content)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkSessionCopy: a session's files persist through the copy back, a write beyond the bound fails
// inside and leaves the host copy within it, and the session stays usable.
func checkSessionCopy(t *testing.T, tr *testRunner) {
	tr.exec("s", code("bash", "echo one > one.txt"))
	if out := tr.exec("s", code("bash", "cat one.txt")).Run.Stdout; out != "one\n" {
		t.Fatalf("session file did not persist: %q", out)
	}
	dir := tr.sessions["s"].dir
	if b, err := os.ReadFile(filepath.Join(dir, "one.txt")); err != nil || string(b) != "one\n" {
		t.Fatalf("host session copy: %q %v", b, err)
	}
	resp := tr.exec("s", code("bash", writeTwice))
	if resp.Run.Stdout == "wrote\n" || !strings.Contains(resp.Run.Stderr, "No space left") || treeBytes(t, dir) > testBound {
		t.Fatalf("session write past the bound: %+v, host copy %d bytes", resp.Run, treeBytes(t, dir))
	}
	if out := tr.exec("s", code("bash", "rm big; cat one.txt")).Run.Stdout; out != "one\n" {
		t.Fatalf("session after the full write: %q", out)
	}
}

func TestPrivateWorkspace(t *testing.T) {
	checkBounded(t, native(t))
}

// TestPrivateWorkspaceUnprivileged runs the same checks as uid 65534, the server the private mode is for
// (no mount rights, no CAP_DAC_OVERRIDE), plus a session tree the server cannot read back, which must be
// refused whole.
func TestPrivateWorkspaceUnprivileged(t *testing.T) {
	if os.Getenv(unprivRunner) == "1" {
		sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeBestEffort})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		checkBounded(t, sb)
		tr := boundedRunner(t, sb, testBound)
		checkUnreadableKept(t, tr)
		checkUnreadableFileOut(t, tr)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: TestPrivateWorkspace covers this case")
	}
	native(t)
	out, err := testhelp.RunAsNobody(t, "^TestPrivateWorkspaceUnprivileged$", unprivRunner+"=1")
	if err != nil || !strings.Contains(out, "--- PASS: TestPrivateWorkspaceUnprivileged") {
		t.Fatalf("unprivileged child: %v\n%s", err, out)
	}
}

// checkUnreadableKept: a file and a directory the run left at mode 000 are collected with the rest of the
// session's changes (issue 35 item 15: the execute was 500 and every change of it was dropped, the
// collector being their owner without CAP_DAC_OVERRIDE). The session keeps them, readable by their owner
// again (a kept file is at least 0600, a directory 0700, so that the next copy-in can read them).
func checkUnreadableKept(t *testing.T, tr *testRunner) {
	tr.exec("r", code("bash", "echo before > state.txt"))
	_, err := tr.Execute(t.Context(), "r", code("bash",
		"echo after > state.txt; echo s > secret.txt; chmod 000 secret.txt; mkdir locked; echo in > locked/f; chmod 000 locked"))
	if err != nil {
		t.Fatalf("a run that left unreadable files: %v", err)
	}
	if out := tr.exec("r", code("bash", "cat state.txt secret.txt locked/f; stat -c '%a %n' secret.txt locked")).Run.Stdout; out != "after\ns\nin\n600 secret.txt\n700 locked\n" {
		t.Fatalf("session after a run that left unreadable files: %q", out)
	}
}

// checkUnreadableFileOut: a one-off run's file it made unreadable is listed without content, not an error.
func checkUnreadableFileOut(t *testing.T, tr *testRunner) {
	resp := tr.exec("", code("bash", "echo s > secret.txt; chmod 000 secret.txt"))
	if len(resp.Files) != 1 || resp.Files[0].Name != "secret.txt" || !resp.Files[0].ContentOmitted {
		t.Fatalf("unreadable file out: %+v", resp.Files)
	}
}

// checkCompiled: the compile stage's build products reach the run stage (kept from the compile's tmpfs),
// one-off and in a session, and are never files out.
func checkCompiled(t *testing.T, tr *testRunner) {
	if _, ok := tr.findRuntime("c", "*"); !ok {
		if requireSandbox() {
			t.Fatal("gcc is not installed (.ci/run installs it)")
		}
		return
	}
	req := ExecuteRequest{Language: "c", Version: "*", Files: []File{{Name: "main.c",
		Content: ptr("#include <stdio.h>\nint main(void) { FILE *f = fopen(\"out.txt\", \"w\"); fputs(\"c\\n\", f); fclose(f); puts(\"OK\"); return 0; }")}}}
	for _, sid := range []string{"", "compiled"} {
		resp := tr.exec(sid, req)
		if resp.Run.Stdout != "OK\n" || len(resp.Files) != 1 || resp.Files[0].Name != "out.txt" {
			t.Fatalf("session %q: compile %+v run %+v files %+v", sid, resp.Compile, resp.Run, resp.Files)
		}
	}
}

// checkTooLarge: request files that would not fit beside the session's files are refused before they are
// written (413); otherwise the copy into the sandbox would fail on this and every later execute.
func checkTooLarge(t *testing.T, tr *testRunner) {
	tr.exec("full", code("bash", "head -c 900000 /dev/zero > big; echo ok"))
	req := ExecuteRequest{Language: "bash", Version: "*", Files: []File{{Name: "main.sh", Content: ptr("echo ran")},
		{Name: "more.bin", Content: ptr(strings.Repeat("x", 200000))}}}
	_, err := tr.Execute(t.Context(), "full", req)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--runner-workspace-size") {
		t.Fatalf("request files past the bound: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tr.sessions["full"].dir, "more.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused request file written to the host copy: %v", err)
	}
	if out := tr.exec("full", code("bash", "wc -c < big")).Run.Stdout; out != "900000\n" {
		t.Fatalf("session after the refusal: %q", out)
	}
}
