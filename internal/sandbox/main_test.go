package sandbox

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind (reapers,
// copiers). The helper hook itself runs from the package's init, so no
// explicit Main call is needed here; calling it documents the contract.
// CODELLM_TEST_GO_HELPER=1 runs every block on the Go helper (make test
// runs the package both ways).
func TestMain(m *testing.M) {
	Main()
	goHelperForTests = os.Getenv("CODELLM_TEST_GO_HELPER") == "1"
	// The spawner threads live for the whole process by design.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"),
		goleak.Cleanup(func(code int) { closeShared(); os.Exit(code) })) // a Cleanup must exit itself
}

// closeShared closes the shared Sandboxes (sandboxFor), whose pooled run
// cgroups would otherwise outlive the test binary.
func closeShared() {
	sbMu.Lock()
	defer sbMu.Unlock()
	for k, s := range sbCache {
		_ = s.Close()
		delete(sbCache, k)
	}
}
