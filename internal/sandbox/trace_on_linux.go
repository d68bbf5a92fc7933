//go:build codellm_trace && linux

package sandbox

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// traceOut is where Trace appends: the file CODELLM_TRACE_FILE names, opened
// on first use; nowhere without it.
var traceOut = sync.OnceValue(func() *os.File {
	name := os.Getenv("CODELLM_TRACE_FILE")
	if name == "" {
		return nil
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil
	}
	return f
})

var traceMu sync.Mutex

// Trace appends "S <label> <CLOCK_MONOTONIC ns>" to CODELLM_TRACE_FILE, the
// clock the helper's points use (hook.Trace). Only
// a `-tags codellm_trace` build has it, for bench's trace row.
func Trace(label string) {
	f := traceOut()
	if f == nil {
		return
	}
	ns := monoNow()
	traceMu.Lock()
	fmt.Fprintf(f, "S %s %d\n", label, ns)
	traceMu.Unlock()
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
