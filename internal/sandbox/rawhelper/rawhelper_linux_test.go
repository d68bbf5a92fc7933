//go:build linux && (amd64 || arm64)

package rawhelper

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/rawchild"
)

// blockSpec is a block's spec as the server makes it (private root without
// overlays, rlimits, no_new_privs, the capability drop) for a workdir dir
// seen at /mnt/data.
func blockSpec(dir string) *hook.Spec {
	return &hook.Spec{
		Path: "/bin/sh", Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/mnt/data", HostDir: dir, Init: true,
		Mech: hook.MHelper | hook.MUserNS | hook.MPIDNS | hook.MMountNS | hook.MUTSNS | hook.MRootFS | hook.MRlimit |
			hook.MNoNewPrivs | hook.MCaps,
		TmpSize: 8 << 20, FileSize: 1 << 20, OpenFiles: 64,
		SystemDirs: []string{"/usr", "/bin", "/lib", "/lib64"}, EtcEntries: []string{"ld.so.cache"},
		Passwd: []byte("sandbox:x:1000:1000::/mnt/data:/bin/sh\n"), Group: []byte("sandbox:x:1000:\n"),
		Hosts: []byte("127.0.0.1 localhost\n"), Hostname: []byte("codellm\n"), Staging: "/tmp", UTSName: "codellm",
	}
}

func userNamespaces(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		t.Skip("no user namespaces")
	}
}

// A compiled block runs as the Go helper would run it: in its root, the
// workdir copied, as uid 1000 of its namespace, under its host name, with
// its rlimits, no capabilities and no_new_privs.
func TestCompiledBlockRuns(t *testing.T) {
	userNamespaces(t)
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/run.sh", []byte("echo from-run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sp := blockSpec(dir)
	sp.Args = []string{"sh", "-c", `sh run.sh; id -u; hostname; pwd; ulimit -n; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status | tr -s '\t ' ' '; test -e /home || echo no-home`}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := &rawchild.Prog{}
	prog, err := Compile(p, sp, Host{UID: 1000, GID: 1000, Dir: int(d.Fd())})
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, p, prog, d)
	want := "from-run\n1000\ncodellm\n/mnt/data\n64\nCapEff: 0000000000000000\nNoNewPrivs: 1\nno-home\n"
	if out != want {
		t.Errorf("the block printed %q, want %q", out, want)
	}
}

// run starts p with the uid and gid maps a server would write and returns
// what the program printed; a failed step fails the test.
func run(t *testing.T, p *rawchild.Prog, prog rawchild.Program, dir *os.File) string {
	t.Helper()
	return runCloned(t, p, prog, dir, syscall.CLONE_NEWUSER|syscall.CLONE_NEWPID|syscall.CLONE_NEWNS|syscall.CLONE_NEWUTS)
}

// runCloned is run with the clone's namespaces given.
func runCloned(t *testing.T, p *rawchild.Prog, prog rawchild.Program, dir *os.File, cloneflags uintptr) string {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer statR.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	pid, err := rawchild.Start(p, prog, rawchild.Attr{
		Cloneflags: cloneflags,
		UIDMap:     "1000 " + strconv.Itoa(os.Getuid()) + " 1", GIDMap: "1000 " + strconv.Itoa(os.Getgid()) + " 1",
		Pdeathsig: syscall.SIGKILL, Stdin: null, Stdout: outW, Stderr: outW, Status: statW, Extra: []rawchild.FD{dir}})
	outW.Close()
	statW.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(outR)
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	for {
		rec, err := rawchild.ReadRecord(statR)
		if err != nil {
			break
		}
		if se := rec.Err(); se != nil {
			t.Fatalf("%v (tag %d); the program printed %q", se, se.Tag, out)
		}
	}
	return string(out)
}

// A helper cloned with only the user and PID namespaces (AtClone) makes
// the others itself (Host.Unshare): its mount, network, IPC and UTS
// namespaces are not the caller's; without Unshare its network and IPC
// namespaces are.
func TestHelperUnsharesTheOtherNamespaces(t *testing.T) {
	userNamespaces(t)
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	kinds := []string{"mnt", "net", "ipc", "uts"}
	var ours []string
	for _, k := range kinds {
		l, err := os.Readlink("/proc/self/ns/" + k)
		if err != nil {
			t.Skip(err)
		}
		ours = append(ours, l)
	}
	sp := blockSpec(dir)
	sp.Mech &^= hook.MRootFS | hook.MUTSNS // the namespaces alone, read through the host's /proc
	sp.Args = []string{"sh", "-c", "for k in mnt net ipc uts; do readlink /proc/self/ns/$k; done"}
	for _, unshare := range []uintptr{0, syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS} {
		p := &rawchild.Prog{}
		prog, err := Compile(p, sp, Host{UID: 1000, GID: 1000, Dir: int(d.Fd()), Unshare: unshare})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Fields(runCloned(t, p, prog, d, AtClone))
		if len(got) != len(kinds) {
			t.Fatalf("unshare %#x: the block printed %q", unshare, got)
		}
		for i, k := range kinds {
			if same := got[i] == ours[i]; same != (unshare == 0) {
				t.Errorf("unshare %#x: the block's %s namespace %s, ours %s", unshare, k, got[i], ours[i])
			}
		}
	}
	if _, err := Compile(&rawchild.Prog{}, sp, Host{Dir: int(d.Fd()), Unshare: syscall.CLONE_NEWTIME}); err == nil {
		t.Error("a namespace the helper cannot unshare itself was compiled")
	}
}

// Every spec the raw helper does not serve is refused before anything
// starts, with a reason; the common block is not.
func TestFallbacks(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h := Host{UID: 1000, GID: 1000, Dir: int(d.Fd())}
	for name, change := range map[string]func(*hook.Spec){
		"probe":      func(sp *hook.Spec) { sp.ProbeOnly = true },
		"no user ns": func(sp *hook.Spec) { sp.Mech &^= hook.MUserNS },
		"big copy":   func(sp *hook.Spec) { sp.WorkSize = 4096 },
	} {
		if name == "big copy" {
			if err := os.WriteFile(dir+"/big", make([]byte, 4096), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		sp := blockSpec(dir)
		change(sp)
		_, err := Compile(&rawchild.Prog{}, sp, h)
		var fe *FallbackError
		if !errors.As(err, &fe) || fe.Reason == "" {
			t.Errorf("%s: Compile returned %v, want a FallbackError with its reason", name, err)
		}
		os.Remove(dir + "/big")
	}
	if _, err := Compile(&rawchild.Prog{}, blockSpec(dir), h); err != nil {
		t.Errorf("the common block: %v", err)
	}
	sp := blockSpec(dir)
	sp.Persist, sp.DirIsTree = true, true
	if _, err := Compile(&rawchild.Prog{}, sp, h); err != nil {
		t.Errorf("a persistent workdir by tree: %v", err)
	}
}

// A workdir of more entries than the raw copy takes gets the Go helper.
func TestWorkdirOfManyEntriesFallsBack(t *testing.T) {
	dir := t.TempDir()
	for i := range maxCopyEntries + 1 {
		if err := os.WriteFile(dir+"/f"+strconv.Itoa(i), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := Compile(&rawchild.Prog{}, blockSpec(dir), Host{Dir: int(d.Fd())}); !strings.Contains(err.Error(), "entries") {
		t.Errorf("Compile returned %v, want a fallback for the entries", err)
	}
}
