package testhelp

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PIDs returns the host PIDs (Linux /proc) whose /proc/PID/<file> (e.g. "cmdline", "stat") is readable and satisfies
// keep. A process that exits during the scan is skipped.
func PIDs(t testing.TB, file string, keep func(content []byte) bool) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/" + file)
		if err == nil && keep(b) {
			out = append(out, pid)
		}
	}
	return out
}

// CmdlinePIDs returns the host PIDs whose argv (/proc/PID/cmdline, NUL-separated) contains s.
func CmdlinePIDs(t testing.TB, s string) []int {
	t.Helper()
	return PIDs(t, "cmdline", func(b []byte) bool { return strings.Contains(string(b), s) })
}

// ChildPIDs returns the live children of this process (parent field of /proc/PID/stat).
func ChildPIDs(t testing.TB) []int {
	t.Helper()
	me := strconv.Itoa(os.Getpid())
	return PIDs(t, "stat", func(b []byte) bool {
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			return false
		}
		f := strings.Fields(string(b[i+1:]))
		return len(f) > 1 && f[1] == me
	})
}

// WaitCmdlineGone waits up to d (a hang bound: a signalled process is gone in milliseconds) until no
// process's argv contains s, and returns those still there then. The caller kills what is left (at its
// cleanup, say) so that one failing test does not leave programs running.
func WaitCmdlineGone(t testing.TB, s string, d time.Duration) []int {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		left := CmdlinePIDs(t, s)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// KillCmdline SIGKILLs every process whose argv contains s: a test's cleanup of programs it started.
func KillCmdline(t testing.TB, s string) {
	t.Helper()
	for _, pid := range CmdlinePIDs(t, s) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// WaitCmdline waits up to d (a hang bound) until at least n processes' argv contain s, and returns them;
// it fails the test when they never appear.
func WaitCmdline(t testing.TB, s string, n int, d time.Duration) []int {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		got := CmdlinePIDs(t, s)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes with %q in their argv after %v, want %d", len(got), s, d, n)
		}
	}
}
