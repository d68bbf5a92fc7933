package server_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/sandbox"
)

// TestMain runs the sandbox hook first (the test binary re-executes itself as the sandbox helper) and
// fails the package on leaked goroutines.
func TestMain(m *testing.M) {
	sandbox.Main()
	goleak.VerifyTestMain(m,
		// net/http keeps idle client connections' goroutines until the transport closes them.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		// The sandbox starts helpers from a few threads locked for the life of the process (parent-death
		// signals follow the parent thread); those goroutines are permanent by design.
		goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"),
	)
}
