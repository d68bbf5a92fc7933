package sandbox

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (reapers,
// copiers). The helper hook itself runs from the package's init, so no
// explicit Main call is needed here; calling it documents the contract.
func TestMain(m *testing.M) {
	Main()
	// The spawner threads live for the whole process by design.
	goleak.VerifyTestMain(closingShared{m}, goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"))
}

// closingShared runs the tests, then closes the shared Sandboxes
// (sandboxFor), whose pooled run cgroups would otherwise outlive the binary.
type closingShared struct{ m *testing.M }

func (c closingShared) Run() int {
	code := c.m.Run()
	sbMu.Lock()
	defer sbMu.Unlock()
	for k, s := range sbCache {
		_ = s.Close()
		delete(sbCache, k)
	}
	return code
}
