package sandbox

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/testhelp"
)

// Issue 14 item 7: a host service listening on a pathname socket below a
// directory the sandbox mounts from the host (a system directory, an /etc
// entry, the shared dir) must not be reachable from a block. Read-only binds
// do not stop connect(); the read-only lower-only overlays do.

// unixConnectProbe connects to the Unix socket at path and prints probeOK when
// that worked, else the error.
func unixConnectProbe(path string) []string {
	return py(fmt.Sprintf(`
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(%q); print(%q)
except OSError as e: print("denied", e.errno, e)
`, path, probeOK))
}

// hostListener listens on path (mode 0777, so only the mount stands in the
// way) and accepts until the test ends.
func hostListener(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) }) // after AcceptAndClose's ln.Close
	testhelp.AcceptAndClose(t, ln)
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
}

// refusedOnly checks the protected outcome is ECONNREFUSED (the socket is
// there but is not the listener's) and that the host path still connects.
func refusedOnly(t *testing.T, on outcome, hostPath string) {
	t.Helper()
	if !strings.Contains(on.Stdout, "denied 111 ") {
		t.Fatalf("want ECONNREFUSED inside the sandbox, got %+v", on)
	}
	c, err := net.Dial("unix", hostPath)
	if err != nil {
		t.Fatalf("the host listener stopped answering (the refusal proves nothing): %v", err)
	}
	c.Close()
}

func TestE_HostSocketUnderSharedDir(t *testing.T) {
	nativeSandbox(t)
	shared, err := os.MkdirTemp("", "codellm-sharedsock-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(shared)
	os.Chmod(shared, 0o755)
	hostPath := filepath.Join(shared, "svc.sock")
	hostListener(t, hostPath)
	s, err := New(Config{Mode: ModeNative, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rep := s.Report(); !rep.Ready {
		skipOrFail(t, "native sandbox with a shared dir not ready here: %v %v", rep.Missing, rep.Mechanisms)
	}
	_, on := differential(t, withDisabled(s, MechOverlay), s, nil, unixConnectProbe(SharedMount+"/svc.sock"))
	refusedOnly(t, on, hostPath)
}

// TestE_HostSocketUnderSystemDir puts the socket where the red-team pass
// found one, below /usr/local, and below an /etc entry (bound from the one
// overlay of /etc), for blocks bound from the spawner's overlays and for
// blocks that mount their own (a spawner that overlaid nothing, as an
// unprivileged codellm's). Creating them needs write access there (root, as
// in CI).
func TestE_HostSocketUnderSystemDir(t *testing.T) {
	s := nativeSandbox(t)
	for _, sb := range []struct {
		name string
		s    *Sandbox
	}{{"spawner", s}, {"own", withOwnSpawner(t, s)}} {
		for _, dir := range []string{"/usr/local", "/etc/ssl"} {
			t.Run(sb.name+strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
				hostPath := fmt.Sprintf("%s/codellm-test-%d.sock", dir, os.Getpid())
				if err := os.WriteFile(hostPath, nil, 0o600); err != nil {
					t.Skipf("cannot create a socket in %s (needs root): %v", dir, err)
				}
				os.Remove(hostPath)
				hostListener(t, hostPath)
				_, on := differential(t, withDisabled(sb.s, MechOverlay), sb.s, nil, unixConnectProbe(hostPath))
				refusedOnly(t, on, hostPath)
			})
		}
	}
}

// TestE_HostSocketUnderSubmount: an overlay does not show the mounts below
// its lower layer, so the helper recreates them on top; a socket inside such
// a submount must be refused too, and the submount's files still visible.
// The submount exists only in a private mount namespace of a child test
// process (unshare -m, root), so the host's mount table is never touched.
func TestE_HostSocketUnderSubmount(t *testing.T) {
	const mp = "/usr/local/include"
	if os.Getenv("CODELLM_TEST_SUBMOUNT") == "1" {
		submountInner(t, mp)
		return
	}
	nativeSandbox(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root for a private mount namespace with a tmpfs under /usr/local")
	}
	if st, err := os.Stat(mp); err != nil || !st.IsDir() {
		t.Skipf("%s is not a directory here", mp)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	cmd := exec.Command(unshare, "-m", "--propagation", "private", os.Args[0], "-test.run=^TestE_HostSocketUnderSubmount$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "CODELLM_TEST_SUBMOUNT=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "SUBMOUNT-CHECKED") {
		t.Fatalf("inner test: %v", err)
	}
}

func submountInner(t *testing.T, mp string) {
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "codellm-test", mp).Run(); err != nil {
		t.Fatalf("mount tmpfs on %s in the private namespace: %v", mp, err)
	}
	os.WriteFile(mp+"/marker", []byte("submount"), 0o644)
	hostPath := mp + "/svc.sock"
	hostListener(t, hostPath)
	s := nativeSandbox(t)
	check := func() {
		_, on := differential(t, withDisabled(s, MechOverlay), s, nil, unixConnectProbe(hostPath))
		refusedOnly(t, on, hostPath)
		if o := mustRun(t, s, "/bin/cat", mp+"/marker"); o.Stdout != "submount" {
			t.Fatalf("the submount is not carried into the overlay: %+v", o)
		}
	}
	check() // the server's mount table names the submount
	// A stale table (a mount made after the server's last read): the helper
	// finds the submount in its own mountinfo when the overlay is refused.
	hostMounts.mu.Lock()
	saved := hostMounts.fd
	hostMounts.fd = -1
	hostMounts.mu.Unlock()
	defer func() { hostMounts.mu.Lock(); hostMounts.fd = saved; hostMounts.mu.Unlock() }()
	check()
	fmt.Println("SUBMOUNT-CHECKED")
}

// The overlays must keep what the binds gave: the block's own sockets (in
// /tmp and the workdir) work, interpreters run, the mounts stay read-only,
// nosuid and nodev, and /proc/self/mountinfo names no host path beyond the
// mount points it already showed.
func TestE_OverlaysKeepTheBindsPromises(t *testing.T) {
	s := nativeSandbox(t)
	if !s.plat.use.has(mOverlay) {
		skipOrFail(t, "overlay mechanism unavailable: %s", s.plat.detail[mOverlay])
	}
	t.Run("spawner", func(t *testing.T) { overlaysKeepPromises(t, s) })
	t.Run("own", func(t *testing.T) { overlaysKeepPromises(t, withOwnSpawner(t, s)) })
}

// overlaysKeepPromises is TestE_OverlaysKeepTheBindsPromises for the blocks of s.
func overlaysKeepPromises(t *testing.T, s *Sandbox) {
	o := mustRun(t, s, py(`
import os, socket, subprocess, threading
for label, path in (("tmp", "/tmp/own.sock"), ("workdir", os.getcwd() + "/own.sock")):
    srv = socket.socket(socket.AF_UNIX); srv.bind(path); srv.listen(1)
    def serve():
        c, _ = srv.accept(); c.sendall(c.recv(16)); c.close()
    th = threading.Thread(target=serve); th.start()
    cl = socket.socket(socket.AF_UNIX); cl.connect(path); cl.sendall(b"ping")
    print(label, cl.recv(16).decode()); th.join()
print(subprocess.run(["/bin/bash", "-c", "echo bash $((6*7))"], capture_output=True, text=True).stdout.strip())
try:
    open("/usr/x", "w")
except OSError as e: print("usr write", e.errno)
print(open("/proc/self/mountinfo").read())
`)...)
	for _, want := range []string{"tmp ping", "workdir ping", "bash 42", "usr write "} {
		if !strings.Contains(o.Stdout, want) {
			t.Fatalf("missing %q in %+v", want, o)
		}
	}
	overlays := 0
	line := regexp.MustCompile(`^\S+ \S+ \S+ (\S+) (\S+) (\S+)(?: .*)? - overlay overlay (\S+)$`)
	fdLayer := regexp.MustCompile(`^/proc/self/fd/\d+$`)
	for _, l := range strings.Split(o.Stdout, "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		overlays++
		root, point, flags, opts := m[1], m[2], m[3], m[4]
		for _, f := range []string{"ro", "nosuid", "nodev"} {
			if !strings.Contains(","+flags+",", ","+f+",") {
				t.Errorf("%s: mount flags %s lack %s", point, flags, f)
			}
		}
		// The lower layer is the mount point itself, or its parent when the
		// mount is a bind of the parent's overlay (root names the rest), or a
		// descriptor; the second layer is the empty "proc".
		lower := regexp.MustCompile(`lowerdir=([^,]*):proc(,|$)`).FindStringSubmatch(opts)
		ok := lower != nil && (strings.TrimSuffix(lower[1]+root, "/") == point || fdLayer.MatchString(lower[1]) && root == "/")
		if !ok {
			t.Errorf("%s (root %s): overlay options %s name more than its own mount point", point, root, opts)
		}
	}
	if overlays == 0 {
		t.Fatalf("no overlay in the block's mountinfo:\n%s", o.Stdout)
	}
}
