package testhelp

import (
	"os"
	"strconv"
	"strings"
	"testing"
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
