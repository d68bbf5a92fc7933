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
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"))
}
