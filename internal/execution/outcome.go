package execution

import (
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/sandbox"
)

// Status is how a program ended.
type Status uint8

const (
	Exited       Status = iota // ended on its own with an exit code (Outcome.Code, zero or not)
	Signalled                  // died of a signal no limit accounts for (Outcome.Signal)
	WallTimeout                // codellm stopped it at its wall-clock timeout
	CPULimit                   // the kernel killed it at its CPU-time limit (RLIMIT_CPU)
	MemoryLimit                // the cgroup's OOM killer ended it
	PidsLimit                  // it failed after its run hit the cgroup's pids limit
	OutputLimit                // codellm stopped it when its output passed the cap
	Cancelled                  // codellm stopped it because the caller went away or a sibling failed
	SandboxError               // the sandbox failed (Outcome.Err)
)

var statusNames = [...]string{"exited", "signalled", "wall_timeout", "cpu_limit", "memory_limit", "pids_limit",
	"output_limit", "cancelled", "sandbox_error"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "status " + strconv.Itoa(int(s))
}

// MetricReason is the codellm_kills_total{reason} of a status ("" when no limit or kill of codellm's
// ended the program). It is the only mapping from outcomes to metric reasons; metrics.KillReasons lists
// the same six values.
func (s Status) MetricReason() string {
	switch s {
	case WallTimeout:
		return "timeout"
	case Cancelled:
		return "cancelled"
	case OutputLimit:
		return "output_limit"
	case MemoryLimit:
		return "memory"
	case PidsLimit:
		return "pids"
	case CPULimit:
		return "cpu"
	}
	return ""
}

// Outcome is a Status and the numbers. Code is the exit code when Status is Exited (-1 otherwise);
// Signal is the signal that ended the process, if one did (also for the kill of a limit or of codellm).
type Outcome struct {
	Status    Status
	Code      int
	Signal    syscall.Signal
	Wall, CPU time.Duration
	MaxRSS    int64
	LimitDesc string // human text of the limit ("memory limit 512 MiB"), for messages only
	Err       error  // SandboxError's cause
}

// OK reports a clean exit 0.
func (o Outcome) OK() bool { return o.Status == Exited && o.Code == 0 }

// Why is codellm's reason for stopping a program, if it did.
type Why uint8

const (
	NotStopped  Why = iota
	ForTimeout      // its wall-clock timeout passed
	ForOutput       // its output passed the cap
	ForCancel       // the caller went away, or the run failed elsewhere
	ForUnneeded     // its result no longer matters (a pipeline already decided); not a limit, not a failure
)

// Of classifies a sandbox result. why is codellm's reason for stopping the program; it wins over what
// the process did afterwards (a program that handles the SIGTERM of a timeout and exits 0 still timed
// out), except that ForUnneeded reports what the process did.
func Of(res sandbox.Result, why Why) Outcome {
	o := Outcome{Code: -1, Signal: res.Signal, Wall: res.Wall, CPU: res.CPU, MaxRSS: res.MaxRSS, LimitDesc: res.LimitDesc}
	if res.Signal == 0 {
		o.Code = res.ExitCode
	}
	switch {
	case res.Err != nil:
		o.Status, o.Err = SandboxError, res.Err
	case why == ForTimeout:
		o.Status = WallTimeout
	case why == ForOutput:
		o.Status = OutputLimit
	case why == ForCancel:
		o.Status = Cancelled
	case res.Limit == sandbox.LimitMemory:
		o.Status = MemoryLimit
	case res.Limit == sandbox.LimitPids:
		o.Status = PidsLimit
	case res.Limit == sandbox.LimitCPU:
		o.Status = CPULimit
	case res.Signal != 0:
		o.Status = Signalled
	default:
		o.Status = Exited
	}
	return o
}

// SignalName is the one signal-name table: the conventional name ("SIGKILL"), or "SIG" and the number
// for a signal the platform does not name (real-time ones), which still matches ^SIG[A-Z0-9]+$.
func SignalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}
