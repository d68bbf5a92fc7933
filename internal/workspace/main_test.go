package workspace

import (
	"os"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// TestMain lets tests re-execute the test binary as the `codellm workspace` CLI (real processes, real exit
// codes), optionally crashing itself with SIGKILL at a chosen step of a write.
func TestMain(m *testing.M) {
	if os.Getenv("CODELLM_WS_TEST_CLI") == "1" {
		if step := os.Getenv("CODELLM_WS_CRASH_AT"); step != "" {
			writeHook = func(s string) {
				if s == step {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
					select {}
				}
			}
		}
		os.Exit(RunCLI(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	// The sandbox package keeps a pool of locked spawner threads for its whole life; those are not ours.
	ignore := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop")}
	code := m.Run()
	if nativeSB != nil {
		_ = nativeSB.Close() // its pooled run cgroups would outlive the binary
	}
	// No goroutine of this package may outlive the operations (enumerators, output readers, waiters).
	if code == 0 {
		if err := goleak.Find(ignore...); err != nil {
			os.Stderr.WriteString("goroutine leak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
