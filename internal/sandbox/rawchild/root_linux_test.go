//go:build linux && (amd64 || arm64)

package rawchild

import (
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/codellm/codellm/internal/testhelp"
	"golang.org/x/sys/unix"
)

func systemBinds() []Bind {
	var bs []Bind
	for _, d := range []string{"/usr", "/bin", "/lib", "/lib64"} {
		bs = append(bs, Bind{Source: d, Target: d, Optional: true})
	}
	return bs
}

const rootProbe = `ls /; test -e /home && echo home; echo x > /x 2>/dev/null || echo root-ro;
echo x > /usr/codellm-x 2>/dev/null || echo usr-ro; echo x > /work/w && echo work-rw; pwd`

// Differential: the program sees the host's tree without a Root, and only
// its binds (read-only but for the writable one), proc and its workdir
// with one; the host sees nothing of it.
func TestRootShowsOnlyItsBinds(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	work, staging := t.TempDir(), t.TempDir()
	if out, _ := run(t, &Prog{}, "test -e /home && echo home"); out != "home\n" {
		t.Skipf("the host has no /home (%q): the test would show nothing", out)
	}
	p := &Prog{}
	p.AddRoot(Root{Staging: staging, Size: 1 << 20, Proc: true, Dir: "/work",
		Binds: append(systemBinds(), Bind{Source: work, Target: "/work", Writable: true},
			Bind{Source: "/nonexistent-codellm", Target: "/opt/none", Optional: true})})
	got, _ := start(t, p, sh(rootProbe), flags, nil).result(t, p)
	for _, want := range []string{"proc\n", "usr\n", "work\n", "root-ro\n", "usr-ro\n", "work-rw\n", "/work\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("program's view %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "home") {
		t.Errorf("program's view %q shows the host's /home", got)
	}
	if b, err := os.ReadFile(work + "/w"); err != nil || string(b) != "x\n" {
		t.Errorf("the writable bind's file %q (%v)", b, err)
	}
	if ents, _ := os.ReadDir(staging); len(ents) != 0 {
		t.Errorf("the host's staging directory holds %v: the root leaked out of the child's namespace", ents)
	}
}

func TestRootNamesAMissingRequiredBind(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	p := &Prog{}
	p.AddRoot(Root{Staging: t.TempDir(), Binds: append(systemBinds(), Bind{Source: "/nonexistent-codellm", Target: "/opt/x"})})
	c := start(t, p, sh("exit 0"), flags, nil)
	recs := c.records(t)
	c.wait(t)
	if len(recs) != 1 || !strings.Contains(recs[0].Err().Error(), "bind /nonexistent-codellm on /opt/x") {
		t.Errorf("records %+v (%v), want the bind named", recs, recs[0].Err())
	}
}

func TestRootRefusesABadTarget(t *testing.T) {
	p := &Prog{}
	p.AddRoot(Root{Staging: "/tmp", Binds: []Bind{{Source: "/usr", Target: "/usr/../etc"}}})
	if _, err := Start(p, sh("exit 0"), Attr{}); err == nil || !strings.Contains(err.Error(), "clean absolute path") {
		t.Errorf("Start: %v, want the target refused", err)
	}
}

// A tree the parent cloned with open_tree is attached by its descriptor,
// writable when asked; the program has none of the extra descriptors.
func TestRootAttachesATreeByDescriptor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("open_tree(OPEN_TREE_CLONE) needs CAP_SYS_ADMIN")
	}
	work, staging := t.TempDir(), t.TempDir()
	if err := os.WriteFile(work+"/in", []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, work, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		t.Skip(err)
	}
	tree := os.NewFile(uintptr(fd), "tree")
	defer tree.Close()
	p := &Prog{}
	p.AddRoot(Root{Staging: staging, Dir: "/work", Binds: append(systemBinds(),
		Bind{Target: "/work", TreeFD: 4, Writable: true})})
	out, _ := startAttr(t, p, sh("cat in; echo out > out; ls /proc/self/fd"), Attr{
		Cloneflags: userPID(t) | syscall.CLONE_NEWNS, UIDMap: "0 0 1", GIDMap: "0 0 1", Extra: []FD{tree}}).result(t, p)
	if !strings.HasPrefix(out, "from the host\n") {
		t.Errorf("program output %q, want the host's file read through the tree", out)
	}
	if b, err := os.ReadFile(work + "/out"); err != nil || string(b) != "out\n" {
		t.Errorf("written through the tree: %q (%v)", b, err)
	}
	// ls's own listing: 0, 1, 2 and its directory; no 4.
	if strings.Contains(out, "\n4\n") {
		t.Errorf("the program holds an extra descriptor: %q", out)
	}
}

func TestRootWritesItsFiles(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	passwd := "sandbox:x:1000:1000::/work:/bin/sh\n"
	p := &Prog{}
	p.AddRoot(Root{Staging: t.TempDir(), Binds: systemBinds(), Files: []File{{Path: "/etc/passwd", Data: []byte(passwd), Mode: 0o644}}})
	out, _ := start(t, p, sh("cat /etc/passwd; stat -c %a /etc/passwd; (echo x >> /etc/passwd) 2>&- || echo ro"), flags, nil).result(t, p)
	if out != passwd+"644\nro\n" {
		t.Errorf("program output %q, want the root's passwd, mode 644, read-only", out)
	}
}

func TestExpectFailsAShortResult(t *testing.T) {
	p := &Prog{}
	p.Call("write to stdout", syscall.SYS_WRITE, Val(1), Val(p.Str("ab")), Val(2))
	p.Expect(3)
	c := start(t, p, sh("exit 0"), 0, nil)
	recs := c.records(t)
	c.wait(t)
	if len(recs) != 1 || recs[0].Kind != KindFailed || syscall.Errno(recs[0].B) != syscall.EIO {
		t.Errorf("records %+v, want the short write failed with EIO", recs)
	}
}

const devProbe = `echo hi > /dev/null && echo devnull-ok; wc -c < /proc/cmdline; readlink /dev/stdout;
stat -c %A /tmp; (echo x > /tmp/a) 2>&- && echo tmp-rw; (echo x > /dev/shm/a) 2>&- && echo shm-rw`

// Differential for the mask: /proc/cmdline has the host's boot line
// without it and reads empty with it. /dev's nodes work, /tmp and /dev/shm
// are the block's own.
func TestRootDevTmpAndMaskedProc(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	root := func(masked []string) Root {
		return Root{Staging: t.TempDir(), Binds: systemBinds(), Proc: true, DevNodes: []string{"null", "zero"},
			TmpSize: 1 << 20, ProcMasked: masked}
	}
	for _, masked := range [][]string{nil, {"cmdline", "no-such-proc-file"}} {
		p := &Prog{}
		p.AddRoot(root(masked))
		out, _ := start(t, p, sh(devProbe), flags, nil).result(t, p)
		lines := strings.Split(out, "\n")
		if len(lines) < 6 || lines[0] != "devnull-ok" || lines[2] != "/proc/self/fd/1" || lines[3] != "drwxrwxrwt" ||
			lines[4] != "tmp-rw" || lines[5] != "shm-rw" {
			t.Errorf("masked %v: program output %q", masked, out)
			continue
		}
		if empty := lines[1] == "0"; empty != (masked != nil) {
			t.Errorf("masked %v: /proc/cmdline is %s bytes", masked, lines[1])
		}
	}
}

// Mirror reproduces a host tree's entries by kind: the link as a link, the
// directory and the file as read-only binds, the socket not at all.
func TestMirrorByKind(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	host := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(host+"/dir", 0o755))
	must(os.WriteFile(host+"/dir/inner", []byte("inner\n"), 0o644))
	must(os.WriteFile(host+"/file", []byte("file\n"), 0o644))
	must(os.Symlink("dir/inner", host+"/link"))
	ln, err := net.Listen("unix", host+"/sock")
	must(err)
	defer ln.Close()
	r := Root{Staging: t.TempDir(), Binds: systemBinds()}
	for _, e := range []string{"dir", "file", "link", "sock", "missing"} {
		must(r.Mirror(host+"/"+e, "/m/"+e, false))
	}
	dirsOnly := Root{}
	must(dirsOnly.Mirror(host+"/file", "/m/file", true))
	if len(dirsOnly.Binds) != 0 {
		t.Errorf("dirsOnly mirrored a file: %+v", dirsOnly.Binds)
	}
	p := &Prog{}
	p.AddRoot(r)
	out, _ := start(t, p, sh("ls /m; cat /m/file /m/link; readlink /m/link; (echo x > /m/file) 2>&- || echo ro"), flags, nil).result(t, p)
	if want := "dir\nfile\nlink\nfile\ninner\ndir/inner\nro\n"; out != want {
		t.Errorf("program output %q, want %q", out, want)
	}
}

// workSource is a host directory for a workdir copy: a file, a directory
// with a file, a link; and the Entries that describe it.
func workSource(t *testing.T) (string, []Entry) {
	t.Helper()
	src := t.TempDir()
	for _, f := range []struct{ name, data string }{{"a", "hello\n"}, {"d/b", "inner\n"}} {
		if err := os.MkdirAll(src+"/d", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(src+"/"+f.name, []byte(f.data), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a", src+"/l"); err != nil {
		t.Fatal(err)
	}
	return src, []Entry{{Name: "a", Mode: unix.S_IFREG | 0o640, Size: 6}, {Name: "d", Mode: unix.S_IFDIR | 0o755},
		{Name: "d/b", Mode: unix.S_IFREG | 0o640, Size: 6}, {Name: "l", Mode: unix.S_IFLNK | 0o777, Link: "a"}}
}

// The workdir copy: what the program finds is the source's tree, in a
// private writable tmpfs of the given size and inodes, and the host's
// directory is left as it was.
func TestWorkdirCopy(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	src, entries := workSource(t)
	dir, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	p := &Prog{}
	p.AddRoot(Root{Staging: t.TempDir(), Binds: systemBinds(), TmpSize: 4 << 20, TmpInodes: 5000, Dir: "/tmp/w",
		Work: &Work{Dir: "/tmp/w", Size: 1 << 20, Inodes: 4096, FromFD: 4, Copy: entries}})
	got, _ := startAttr(t, p, sh(`cat a d/b; readlink l; echo new > n && echo rw; stat -f -c %c /tmp/w /tmp`),
		Attr{Cloneflags: flags, Extra: []FD{dir}}).result(t, p)
	if want := "hello\ninner\na\nrw\n4096\n5000\n"; got != want {
		t.Errorf("program's view %q, want %q", got, want)
	}
	if _, err := os.Stat(src + "/n"); !os.IsNotExist(err) {
		t.Errorf("the program's write reached the host's directory (%v)", err)
	}
}

// Differential: a file the parent listed, swapped for a link to a host file
// before the child copies it, is copied while it is a file and refused once
// it is a link (the copy follows no link).
func TestWorkdirCopyRefusesASwappedLink(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	for _, swapped := range []bool{false, true} {
		src, entries := workSource(t)
		if swapped {
			if err := os.Remove(src + "/a"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/etc/hostname", src+"/a"); err != nil {
				t.Fatal(err)
			}
		}
		dir, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		p := &Prog{}
		p.AddRoot(Root{Staging: t.TempDir(), Binds: systemBinds(), TmpSize: 1 << 20, Dir: "/tmp/w",
			Work: &Work{Dir: "/tmp/w", Size: 1 << 20, FromFD: 4, Copy: entries[:1]}})
		c := startAttr(t, p, sh("cat a"), Attr{Cloneflags: flags, Extra: []FD{dir}})
		recs := c.records(t)
		c.wait(t)
		dir.Close()
		failed := len(recs) > 0 && recs[0].Kind == KindFailed
		if failed != swapped {
			t.Errorf("swapped %v: records %+v", swapped, recs)
		}
		if swapped && (recs[0].What != "copy workdir: open a" || syscall.Errno(recs[0].B) != syscall.ELOOP) {
			t.Errorf("the refusal %+v, want the open of a with ELOOP", recs[0])
		}
	}
}

// Differential: a source below the staging directory is covered by the
// root's tmpfs before a plain bind can reach it; an Early bind takes it
// first.
func TestEarlyBindReachesASourceBelowStaging(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	for _, early := range []bool{false, true} {
		staging := t.TempDir()
		if err := os.MkdirAll(staging+"/shared", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(staging+"/shared/f", []byte("shared\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := &Prog{}
		p.AddRoot(Root{Staging: staging, Binds: append(systemBinds(), Bind{Source: staging + "/shared", Target: "/codellm", Early: early})})
		c := start(t, p, sh("cat /codellm/f; (echo x > /codellm/g) 2>&- || echo ro"), flags, nil)
		out, _ := io.ReadAll(c.stdout)
		recs := c.records(t)
		c.wait(t)
		if early && string(out) != "shared\nro\n" {
			t.Errorf("early: the program read %q (records %+v), want the shared file, read-only", out, recs)
		}
		if !early && (len(recs) == 0 || recs[0].Kind != KindFailed || !strings.Contains(recs[0].What, "bind "+staging+"/shared")) {
			t.Errorf("not early: records %+v, want the bind refused (its source covered)", recs)
		}
	}
}

// Differential: a host Unix socket below a directory shown through a bind
// answers connect(); through an Overlay it refuses (ECONNREFUSED), while the
// directory's files read the same. An Early overlay reaches a source below
// the staging directory, and an in-place overlay serves the binds of its
// entries.
func TestOverlayRefusesHostSockets(t *testing.T) {
	flags := userPID(t) | syscall.CLONE_NEWNS
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/f", []byte("file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", dir+"/s")
	if err != nil {
		t.Fatal(err)
	}
	testhelp.AcceptAndClose(t, l)
	probe := sh("cat /h/f; python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('/h/s')\" 2>&1 | tail -n1; echo done")
	for _, c := range []struct {
		name string
		root func(staging string) Root
		want string
	}{
		{"bind", func(st string) Root {
			return Root{Staging: st, Binds: append(systemBinds(), Bind{Source: dir, Target: "/h"})}
		}, "file\ndone\n"},
		{"overlay", func(st string) Root {
			return Root{Staging: st, Binds: append(systemBinds(), Bind{Source: dir, Target: "/h", Overlay: true})}
		}, "file\nConnectionRefusedError: [Errno 111] Connection refused\ndone\n"},
		{"in place", func(st string) Root {
			return Root{Staging: st, InPlace: []string{dir}, Binds: append(systemBinds(), Bind{Source: dir, Target: "/h"})}
		}, "file\nConnectionRefusedError: [Errno 111] Connection refused\ndone\n"},
	} {
		p := &Prog{}
		p.AddRoot(c.root(t.TempDir()))
		got, _ := start(t, p, probe, flags, nil).result(t, p)
		if got != c.want {
			t.Errorf("%s: the program printed %q, want %q", c.name, got, c.want)
		}
	}
	staging := t.TempDir()
	if err := os.MkdirAll(staging+"/below", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(staging+"/below/f", []byte("below\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &Prog{}
	p.AddRoot(Root{Staging: staging, Binds: append(systemBinds(), Bind{Source: staging + "/below", Target: "/h", Overlay: true, Early: true})})
	if got, _ := start(t, p, sh("cat /h/f; (echo x > /h/g) 2>&- || echo ro"), flags, nil).result(t, p); got != "below\nro\n" {
		t.Errorf("early overlay: the program printed %q", got)
	}
}

func TestEscapeLayer(t *testing.T) {
	if got := EscapeLayer(`/a,b:c\d`); got != `/a\,b\:c\\d` {
		t.Errorf("EscapeLayer = %q", got)
	}
}
