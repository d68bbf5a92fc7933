package landlock

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The probes run in a child process (this test binary re-executed), because
// a Landlock domain can never be left again.
const childEnv = "CODELLM_LANDLOCK_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child restricts itself (unless mode is "none") to ReadWrite=$ALLOWED,
// then reports which probes worked on stdout.
func child(mode string) int {
	// Restrict confines only the calling thread (the helper execs right
	// after); the probes must run on that same thread, or a probe that
	// lands on another thread escapes the domain and the test flakes.
	runtime.LockOSThread()
	allowed, outside, addr := os.Getenv("ALLOWED"), os.Getenv("OUTSIDE"), os.Getenv("ADDR")
	if mode == "restrict" {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return 2
		}
		if _, err := Restrict(Policy{ReadWrite: []string{allowed}, DenyTCP: true, Scope: true}); err != nil {
			os.Stderr.WriteString(err.Error())
			return 3
		}
	}
	var got []string
	if os.WriteFile(filepath.Join(allowed, "w"), []byte("x"), 0o600) == nil {
		got = append(got, "write-allowed")
	}
	if _, err := os.ReadFile(outside); err == nil {
		got = append(got, "read-outside")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		got = append(got, "tcp")
	}
	os.Stdout.WriteString(strings.Join(got, ","))
	return 0
}

func runChild(t *testing.T, mode, allowed, outside, addr string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = []string{childEnv + "=" + mode, "ALLOWED=" + allowed, "OUTSIDE=" + outside, "ADDR=" + addr}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v %s", mode, err, out)
	}
	return string(out)
}

// TestRestrictDifferential: without Landlock the child reads a file outside
// its allowed directory and connects over TCP; restricted, only the write
// inside the allowed directory still works.
func TestRestrictDifferential(t *testing.T) {
	if ABI() == 0 {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatal("CODELLM_REQUIRE_SANDBOX=1 but the kernel has no Landlock")
		}
		t.Skip("kernel has no Landlock")
	}
	allowed, other := t.TempDir(), t.TempDir()
	outside := filepath.Join(other, "secret")
	if err := os.WriteFile(outside, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if got := runChild(t, "none", allowed, outside, ln.Addr().String()); got != "write-allowed,read-outside,tcp" {
		t.Fatalf("unrestricted child: %q", got)
	}
	want := "write-allowed"
	if got := runChild(t, "restrict", allowed, outside, ln.Addr().String()); got != want {
		t.Fatalf("restricted child: %q, want %q", got, want)
	}
}
