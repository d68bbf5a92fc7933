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
	goleak.VerifyTestMain(m)
}
