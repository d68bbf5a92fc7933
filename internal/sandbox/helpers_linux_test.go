package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/testhelp"
)

// withDisabled returns a copy of s with some mechanisms switched off (for
// differential tests).
func withDisabled(s *Sandbox, names ...string) *Sandbox {
	c := &Sandbox{cfg: s.cfg, log: s.log, report: s.report, plat: s.plat}
	c.cfg.Mode = ModeBestEffort // native would refuse a partial set
	for _, n := range names {
		b, ok := mechByName(n)
		if !ok {
			panic("unknown mechanism " + n)
		}
		c.plat.disabled |= b
	}
	return c
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// leftChildren is testhelp.ChildPIDs without the spawners of the package's
// shared Sandboxes (sandboxFor), which live as long as the test binary.
func leftChildren(t testing.TB) []int {
	t.Helper()
	sbMu.Lock()
	var shared []int
	for _, s := range sbCache {
		if h := s.plat.spawner; h != nil {
			shared = append(shared, h.pids()...)
		}
	}
	sbMu.Unlock()
	// The shared Sandboxes' spawners hold an idle raw helper each (the
	// server's child): TestRawIdleHelperEndsWithItsSandbox checks those.
	return slices.DeleteFunc(testhelp.ChildPIDs(t), func(pid int) bool { return slices.Contains(shared, pid) || isIdleHelper(pid) })
}

// isIdleHelper reports whether pid is a raw helper forked ahead, waiting.
func isIdleHelper(pid int) bool {
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && string(comm) == "codellm-idle\n"
}

// idleHelpers lists this process's children that are idle raw helpers.
func idleHelpers(t testing.TB) []int {
	return slices.DeleteFunc(testhelp.ChildPIDs(t), func(pid int) bool { return !isIdleHelper(pid) })
}

// describePIDs names each process by its /proc stat line (name, state).
func describePIDs(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		fmt.Fprintf(&b, "[%s] ", strings.Join(strings.Fields(string(stat))[:3], " "))
	}
	return b.String()
}
