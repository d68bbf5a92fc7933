//go:build linux

package sandbox

import (
	"os"

	"github.com/codellm/codellm/internal/sandbox/hook"
)

// helperEnv is the helper's own environment (the program's arrives in the
// spec). The marker lets package hook recognise a helper without a
// syscall; the runtime settings keep a process that lives for a few
// milliseconds and allocates little from starting GC workers or sizing
// itself for every CPU.
var helperEnv = []string{hook.EnvMarker + "=1", "GOGC=off", "GOMAXPROCS=1"}

// Main runs the sandbox helper if this process was started as one, and
// never returns in that case; otherwise it returns at once. Package hook's
// init (imported here, so every binary importing sandbox — codellm and
// every test binary — is a valid helper) normally runs the helper long
// before main; calling Main first thing in main (or TestMain) documents the
// contract and also catches a helper whose environment marker was lost.
func Main() {
	if isHelper() {
		hook.Run()
	}
}

func isHelper() bool { return len(os.Args) == 2 && os.Args[1] == hook.Marker }
