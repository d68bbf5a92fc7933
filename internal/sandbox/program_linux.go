//go:build linux

package sandbox

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// programProcess finds a block's program from codellm's side: the child of
// the block's init (host PID initPID) whose PID in the block's namespace,
// the last field of its NSpid, is the one the init reported with Started
// (nsPID). Terminate signals it directly, so that the init need not
// forward signals (hook.runInit). The handle is a pidfd (os.FindProcess on
// Linux), taken before the child's identity is checked, so a signal sent
// through it cannot reach a process that later reuses the number. nil when
// the program is gone (or was never reported).
func programProcess(initPID, nsPID int) *os.Process {
	if nsPID <= 0 {
		return nil
	}
	for _, pid := range initChildren(initPID) {
		p, err := os.FindProcess(pid)
		if err != nil {
			continue
		}
		if ppid, inner, ok := procParent(pid); ok && ppid == initPID && inner == nsPID {
			return p
		}
		_ = p.Release()
	}
	return nil
}

// initChildren lists the host PIDs of the init's children. The init forks
// the program from its main thread, whose children file lists it; a kernel
// without that file (CONFIG_PROC_CHILDREN off) gets a scan of /proc for the
// init's children instead.
func initChildren(initPID int) []int {
	id := strconv.Itoa(initPID)
	if b, err := os.ReadFile("/proc/" + id + "/task/" + id + "/children"); err == nil {
		return atois(strings.Fields(string(b)))
	}
	return scanChildren(initPID)
}

// scanChildren finds a process's children by reading every process's
// parent from /proc.
func scanChildren(initPID int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procParent(pid); ok && ppid == initPID {
			out = append(out, pid)
		}
	}
	return out
}

// procParent reads a process's parent (PPid, as codellm sees it) and its
// PID in its innermost PID namespace (the last field of NSpid).
func procParent(pid int) (ppid, inner int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, false
	}
	ppid, inner = -1, -1
	for line := range bytes.Lines(b) {
		key, val, found := strings.Cut(strings.TrimSpace(string(line)), ":")
		if !found {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		switch key {
		case "PPid":
			ppid, _ = strconv.Atoi(fields[0])
		case "NSpid":
			inner, _ = strconv.Atoi(fields[len(fields)-1])
		}
	}
	return ppid, inner, ppid >= 0 && inner >= 0
}

func atois(ss []string) []int {
	out := make([]int, 0, len(ss))
	for _, s := range ss {
		if n, err := strconv.Atoi(s); err == nil {
			out = append(out, n)
		}
	}
	return out
}
