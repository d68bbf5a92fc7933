//go:build linux

package spawner

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/testhelp"
)

// runChild runs script in a child of s (new user, PID and mount
// namespaces) and returns its output.
func runChild(t *testing.T, s *Spawner, script string) string {
	t.Helper()
	inR, inW, outR, outW := pipes(t)
	inW.Close()
	p, err := s.Spawn([]string{"SCRIPT=" + script, "PATH=/usr/bin:/bin"}, []*os.File{inR, outW, outW}, userNS())
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(outR)
	outR.Close()
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// A spawner started with directories to overlay mounts them in place in
// its own mount namespace: its children see overlays (a host socket below
// one refuses connect, the files read as before, a hidden layer is named
// by descriptor), the host's mount table does not change, and a directory
// it cannot overlay is reported, not fatal. The same child of a spawner
// without overlays connects: the differential half.
func TestOverlayInPlace(t *testing.T) {
	if userNS() == nil {
		t.Skip("needs root (its own mount namespace, the uid map)")
	}
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3 for the connect probe")
	}
	plain, hidden := searchableDir(t), searchableDir(t)
	for _, d := range []string{plain, hidden} {
		if err := os.WriteFile(d+"/f", []byte("data-"+filepath.Base(d)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sock := plain + "/svc.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	testhelp.AcceptAndClose(t, ln)
	os.Chmod(sock, 0o777)
	before := hostMountCount(t)

	missing := plain + "-missing"
	s := startOverlaid(t, []OverlayDir{{Path: plain}, {Path: hidden, Hidden: true}, {Path: missing}})
	if got := s.Overlaid(); !slices.Equal(got, []string{plain, hidden}) {
		t.Fatalf("overlaid %q, want %q (why: %s)", got, []string{plain, hidden}, s.Why())
	}
	if !strings.Contains(s.Why(), missing) {
		t.Errorf("the reason %q does not name %s", s.Why(), missing)
	}
	if after := hostMountCount(t); after != before {
		t.Errorf("the host's mount table changed: %d mounts, was %d", after, before)
	}
	probe := py + ` -c "import socket; s = socket.socket(socket.AF_UNIX)
try:
    s.connect('` + sock + `'); print('connected')
except OSError as e: print('refused', e.errno)"`
	script := "cat " + plain + "/f " + hidden + "/f; echo; grep -F ' - overlay ' /proc/self/mountinfo; " + probe
	out := runChild(t, s, script)
	if !strings.HasPrefix(out, "data-"+filepath.Base(plain)+"data-"+filepath.Base(hidden)+"\n") {
		t.Errorf("the files through the overlays: %q", out)
	}
	if !strings.Contains(out, " "+plain+" ") || !strings.Contains(out, "lowerdir="+plain+":proc") {
		t.Errorf("no overlay of %s named by its path in the child's mountinfo:\n%s", plain, out)
	}
	if strings.Contains(out, "lowerdir="+hidden) || !strings.Contains(out, "lowerdir=/proc/self/fd/") {
		t.Errorf("the hidden layer is named by its host path:\n%s", out)
	}
	if !strings.Contains(out, "refused 111") {
		t.Errorf("a host socket below the overlay: want ECONNREFUSED, got\n%s", out)
	}
	if c, err := net.Dial("unix", sock); err != nil {
		t.Fatalf("the host listener stopped answering (the refusal proves nothing): %v", err)
	} else {
		c.Close()
	}
	if out := runChild(t, startShell(t), probe); !strings.Contains(out, "connected") {
		t.Errorf("without the spawner's overlays the child should reach the socket: %q", out)
	}
}

func hostMountCount(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// searchableDir is a new directory the children (nobody on the host) can
// search: t.TempDir's parent is private to root.
func searchableDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "codellm-overlay-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// The empty layer's temporary mount must neither cover a directory to be
// overlaid (its path would vanish while the overlays are mounted) nor lie
// below one (the overlay would hide it, and it could not be detached).
func TestEmptyMountForAvoidsTheOverlaidDirs(t *testing.T) {
	for _, tc := range []struct {
		dirs []string
		want string
	}{
		{[]string{"/usr", "/etc"}, "/tmp"},
		{[]string{"/usr", "/tmp/codellm-fleetkit"}, "/dev/shm"},
		{[]string{"/tmp"}, "/dev/shm"},
		{[]string{"/dev", "/tmp/x", "/mnt"}, ""},
	} {
		var dirs []OverlayDir
		for _, d := range tc.dirs {
			dirs = append(dirs, OverlayDir{Path: d})
		}
		got := emptyMountFor(dirs)
		if want := tc.want; want != "" {
			if st, err := os.Stat(want); err != nil || !st.IsDir() {
				t.Skipf("%s is not a directory here", want)
			}
		}
		if got != tc.want {
			t.Errorf("emptyMountFor(%v) = %q, want %q", tc.dirs, got, tc.want)
		}
	}
}
