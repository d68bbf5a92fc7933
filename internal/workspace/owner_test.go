package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCommandsNeverChownTheTree (red-team item 5): execute_command under a root worker chowned every file
// of the registered root to 65534, root-owned 0600 files included. Commands now run as the owner of the
// root: ownership is untouched, new files belong to the owner, and a root-owned root is refused (commands
// never run as host root).
func TestCommandsNeverChownTheTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the chown only happened under a root worker")
	}
	sb := nativeSandbox(t)
	const owner = 4242
	e := newEnv(t, Options{AllowCommands: true, AllowWrites: true, Sandbox: sb})
	e.write("mine.txt", "mine")
	if err := os.WriteFile(filepath.Join(e.root, "rootonly.txt"), []byte("root"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{e.root, filepath.Join(e.root, "mine.txt")} {
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	r := cmdResult(t, e.ok(OpExecuteCommand, `{"command":"cat mine.txt && echo new > new.txt && (cat rootonly.txt 2>/dev/null || echo denied)"}`))
	if r.ExitCode == nil || *r.ExitCode != 0 || r.Stdout != "mine"+"denied\n" {
		t.Fatalf("command as the owner: %+v", r)
	}
	for name, want := range map[string]uint32{".": owner, "mine.txt": owner, "rootonly.txt": 0, "new.txt": owner} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(e.root, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want {
			t.Errorf("%s: owned by %d after the command, want %d", name, st.Uid, want)
		}
	}
	// A root-owned root: refused, nothing runs, nothing changes hands.
	ro := newEnv(t, Options{AllowCommands: true, AllowWrites: true, Sandbox: sb})
	ro.write("f.txt", "x")
	_, err := ro.do(OpExecuteCommand, `{"command":"echo ran > ran.txt"}`)
	var we *Error
	if err == nil || !errors.As(err, &we) || we.Code != CodeCommandUnavailable || !strings.Contains(we.Message, "owned by root") {
		t.Fatalf("root-owned root: %v", err)
	}
	var st syscall.Stat_t
	if syscall.Lstat(filepath.Join(ro.root, "f.txt"), &st); st.Uid != 0 {
		t.Errorf("f.txt was chowned to %d", st.Uid)
	}
	if _, err := os.Stat(filepath.Join(ro.root, "ran.txt")); err == nil {
		t.Error("the command ran in a root-owned root")
	}
}

// TestCommandsReadOnlyWithoutWrites (red-team item 5): --allow-commands without --allow-writes still let
// commands modify files. With writes enabled the command writes (the attack surface it is granted);
// without, the workspace is mounted read-only and the write fails.
func TestCommandsReadOnlyWithoutWrites(t *testing.T) {
	sb := nativeSandbox(t)
	for _, writes := range []bool{true, false} {
		e := newEnv(t, Options{AllowCommands: true, AllowWrites: writes, Sandbox: sb})
		e.write("keep.txt", "original")
		os.Chown(e.root, sandboxUID, sandboxUID)
		os.Chown(filepath.Join(e.root, "keep.txt"), sandboxUID, sandboxUID)
		r := cmdResult(t, e.ok(OpExecuteCommand, `{"command":"cat keep.txt; echo changed > keep.txt && echo WROTE"}`))
		wrote := strings.Contains(r.Stdout, "WROTE")
		if wrote != writes || !strings.HasPrefix(r.Stdout, "original") {
			t.Fatalf("allowWrites=%v: %+v", writes, r)
		}
		if !writes && e.read("keep.txt") != "original" {
			t.Fatal("a read-only command changed keep.txt")
		}
		if !writes && !strings.Contains(r.Stderr, "Read-only file system") {
			t.Errorf("want EROFS, got %q", r.Stderr)
		}
	}
}
