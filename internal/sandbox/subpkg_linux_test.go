package sandbox

// Properties that packages mount and landlock used to test on their own
// implementations (mount.Setup's workdir copy, landlock.Restrict), which
// the helper no longer uses. They are checked here against the live path:
// the root the helper (package hook) builds and the Landlock rules package
// sandbox computes and the helper applies.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestD_WorkdirCopyKeepsTree: the non-persistent workdir copy keeps file
// contents, modes, nested directories and symlinks (as links, unresolved),
// and skips other file types. Control: off mode sees the host tree itself,
// fifo included.
func TestD_WorkdirCopyKeepsTree(t *testing.T) {
	s := nativeSandbox(t)
	dir := workdir(t, nil)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "run.py"), []byte("print(1)\n"), 0o640))
	must(os.Chmod(filepath.Join(dir, "run.py"), 0o640))
	must(os.MkdirAll(filepath.Join(dir, "tmp", "deep"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "tmp", "deep", "f"), []byte("deep"), 0o600))
	must(os.Symlink("/etc/shadow", filepath.Join(dir, "link")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	probe := py(`
import os
print(repr(open("run.py").read()), oct(os.stat("run.py").st_mode & 0o777),
      open("tmp/deep/f").read(), os.readlink("link"), os.path.lexists("fifo"))
`)
	for _, c := range []struct {
		sb   *Sandbox
		want string
	}{
		{offSandbox(t), "'print(1)\\n' 0o640 deep /etc/shadow True\n"},
		{s, "'print(1)\\n' 0o640 deep /etc/shadow False\n"},
	} {
		o, err := runIn(t, c.sb, dir, nil, probe...)
		if err != nil || o.ExitCode != 0 || o.Stdout != c.want {
			t.Fatalf("mode %s: %v %+v\nstdout %q, want %q", c.sb.Mode(), err, o.Result, o.Stdout, c.want)
		}
	}
	// The copy never writes back: the host workdir is as it was.
	if b, err := os.ReadFile(filepath.Join(dir, "run.py")); err != nil || string(b) != "print(1)\n" {
		t.Fatalf("host run.py: %q %v", b, err)
	}
}

// TestD_LandlockAloneConfines: with the private root and the network
// namespace switched off, so that Landlock is the only wall, the block
// still writes its workdir but can neither read a world-readable host file
// outside it nor connect over TCP; without Landlock it can do all three.
func TestD_LandlockAloneConfines(t *testing.T) {
	s := nativeSandbox(t)
	other, err := os.MkdirTemp("", "codellm-hostfile-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(other)
	os.Chmod(other, 0o755)
	outside := filepath.Join(other, "secret")
	if err := os.WriteFile(outside, []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(listenLoopback(t))
	// -I: without the private root the workdir's host parents may not be
	// traversable by the sandbox uid (getcwd fails), so python must not
	// put the working directory on its import path.
	probe := append([]string{"/usr/bin/python3", "-I", "-c"}, fmt.Sprintf(`
import socket
got = []
try:
    open("w", "w").write("x"); got.append("write-allowed")
except OSError: pass
try:
    open(%q).read(); got.append("read-outside")
except OSError: pass
c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
c.settimeout(5)
try:
    c.connect((%q, %s)); got.append("tcp")
except OSError: pass
print(",".join(got))
`, outside, host, port))
	for _, c := range []struct {
		sb   *Sandbox
		want string
	}{
		{withDisabled(s, MechLandlock, MechRootFS, MechNetNS), "write-allowed,read-outside,tcp\n"},
		{withDisabled(s, MechRootFS, MechNetNS), "write-allowed\n"},
	} {
		o, err := runIn(t, c.sb, "", nil, probe...)
		if err != nil || o.ExitCode != 0 || o.Stdout != c.want {
			t.Fatalf("%v %+v\nstdout %q, want %q (stderr %s)", err, o.Result, o.Stdout, c.want, o.Stderr)
		}
	}
}
