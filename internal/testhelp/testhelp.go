// Package testhelp holds test helpers that several packages' tests share, so that a fix to one lands in
// all. It is imported only from _test.go files.
package testhelp

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"
)

// Origin starts an HTTP server on 127.0.0.1 that answers "origin saw <Host>", stopped at the test's end,
// and returns its port. It is the destination of the egress tests: the host's own resolver reaches it as
// "localhost" (from /etc/hosts), so a real binary needs no resolver hook to be pointed at it.
func Origin(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "origin saw %s", r.Host)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// NewWorkDir makes a fresh --work-dir (or runner work root) for a served codellm binary. The runner
// bind-mounts workspaces under it for the sandbox's uid, so it and its parents must be searchable
// (t.TempDir's parent is 0700): it is made under os.TempDir with mode 0711. At cleanup, after the test's
// processes are stopped, it is removed with any workspace tmpfs still mounted in it (RemoveWorkDir: a
// SIGKILLed server leaves them, and os.RemoveAll fails on them).
func NewWorkDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveWorkDir(t, dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// SoakRequests is how many requests a soak test sends: CODELLM_SOAK_REQUESTS (the long form, on
// demand), else short (CI's form; the test is skipped in -short mode).
func SoakRequests(t testing.TB, short int) int {
	t.Helper()
	v := os.Getenv("CODELLM_SOAK_REQUESTS")
	if v == "" {
		if testing.Short() {
			t.Skip("soak: skipped in -short")
		}
		return short
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("CODELLM_SOAK_REQUESTS=%q: want a positive number of requests", v)
	}
	return n
}
