package sandbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// collected is what a Collect saw in a block's private workdir.
type collected struct {
	files   map[string]string
	escaped error // os.Root's answer to opening "link"
	plain   []byte
}

// startCollect starts script in a fresh Persist false workdir holding in.txt, with a Collect that reads
// every regular file of the private workdir through an os.Root, plus "link" both ways.
func startCollect(t *testing.T, s *Sandbox, script string) (*Process, *collected, string) {
	t.Helper()
	dir := workdir(t, map[string]string{"in.txt": "in"})
	r, err := s.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	c := &collected{files: map[string]string{}}
	p, err := r.Start(Spec{Path: "/bin/sh", Args: sh(script), Env: stdEnv("/work"), Dir: dir, MountAt: "/work",
		Stdout: null, Stderr: null, Collect: func(root string) error {
			rt, err := os.OpenRoot(root)
			if err != nil {
				return err
			}
			defer rt.Close()
			ents, err := os.ReadDir(root)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if e.Type().IsRegular() {
					b, err := rt.ReadFile(e.Name())
					if err != nil {
						return err
					}
					c.files[e.Name()] = string(b)
				}
			}
			if _, err := rt.Lstat("link"); err == nil {
				_, c.escaped = rt.ReadFile("link")
				c.plain, _ = os.ReadFile(filepath.Join(root, "link"))
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return p, c, dir
}

// A holding init keeps the block's private workdir readable after the program exits, with everything
// else of the namespace already gone: the background writer never writes, the exit code is the
// program's, and nothing reaches the host workdir.
func TestCollectReadsThePrivateWorkdir(t *testing.T) {
	s := nativeSandbox(t)
	p, c, dir := startCollect(t, s, "echo out > out; (sleep 1; echo late > late) & exit 3")
	// As root the raw helper holds the namespace too (rawCandidate).
	comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/comm")
	if want := "codellm-raw\n"; os.Geteuid() == 0 && !goHelperForTests && string(comm) != want {
		t.Errorf("the holding init is %q, want %q", comm, want)
	}
	res := p.Wait()
	if res.Err != nil || res.ExitCode != 3 || !res.Collected || res.CollectErr != nil {
		t.Fatalf("result %+v", res)
	}
	if c.files["out"] != "out\n" || c.files["in.txt"] != "in" {
		t.Fatalf("collected %v", c.files)
	}
	if _, ok := c.files["late"]; ok {
		t.Fatal("a background process outlived the program into Collect")
	}
	for _, n := range []string{"out", "late"} {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("host workdir has %s: %v", n, err)
		}
	}
}

// Kill ends the program but the files it wrote are still collected (a run stopped at its timeout keeps
// them); the result is the program's SIGKILL.
func TestCollectAfterKill(t *testing.T) {
	s := nativeSandbox(t)
	p, c, _ := startCollect(t, s, "echo partial > part; exec sleep 100")
	// Wait until the file exists: Kill before the program wrote it would collect nothing.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/root/work/part"); err == nil && len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("program never wrote its file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Kill()
	res := p.Wait()
	if !res.Collected || res.CollectErr != nil || res.Signal != syscall.SIGKILL {
		t.Fatalf("result %+v", res)
	}
	if c.files["part"] != "partial\n" {
		t.Fatalf("collected %v", c.files)
	}
}

// The collect root is a /proc/<pid>/root path: an absolute symlink inside resolves against the SERVER's
// root when followed by path, so a plain read returns the host's file; os.Root refuses it.
func TestCollectSymlinkEscapesWithoutRoot(t *testing.T) {
	s := nativeSandbox(t)
	p, c, _ := startCollect(t, s, "ln -s /etc/passwd link")
	if res := p.Wait(); res.ExitCode != 0 || !res.Collected || res.CollectErr != nil {
		t.Fatalf("result %+v", res)
	}
	host, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.plain, host) {
		t.Fatalf("plain read through the link: %q, want the host's /etc/passwd (the attack this guards against)", c.plain)
	}
	if c.escaped == nil {
		t.Fatal("os.Root followed a symlink out of the collected workdir")
	}
}

func TestCollectRefusedWithoutPrivateRoot(t *testing.T) {
	off := sandboxFor(t, ModeOff, false)
	r, err := off.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = r.Start(Spec{Path: "/bin/true", Args: []string{"true"}, Dir: workdir(t, nil), Stdout: os.Stderr, Stderr: os.Stderr,
		Collect: func(string) error { return nil }})
	if !errors.Is(err, ErrInvalidSpec) || r.CanCollect() {
		t.Fatalf("mode off with Collect: %v (CanCollect %v)", err, r.CanCollect())
	}
}
