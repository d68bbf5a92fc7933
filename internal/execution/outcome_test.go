package execution

import (
	"errors"
	"syscall"
	"testing"

	"github.com/codellm/codellm/internal/metrics"
	"github.com/codellm/codellm/internal/sandbox"
)

func TestSignalName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{9: "SIGKILL", 15: "SIGTERM", 11: "SIGSEGV", 6: "SIGABRT", 40: "SIG40"} {
		if got := SignalName(sig); got != want {
			t.Errorf("SignalName(%d) = %q, want %q", sig, got, want)
		}
	}
}

// Of is the one classification: codellm's reason wins, then the sandbox's limit, then the signal.
func TestOf(t *testing.T) {
	kill := sandbox.Result{ExitCode: -1, Signal: syscall.SIGKILL}
	with := func(l sandbox.LimitKind) sandbox.Result { r := kill; r.Limit = l; return r }
	for _, c := range []struct {
		res  sandbox.Result
		why  Why
		want Status
	}{
		{sandbox.Result{}, NotStopped, Exited},
		{sandbox.Result{ExitCode: 3}, NotStopped, Exited},
		{kill, NotStopped, Signalled},
		{sandbox.Result{ExitCode: 0}, ForTimeout, WallTimeout}, // handled the SIGTERM and exited 0: still timed out
		{kill, ForOutput, OutputLimit},
		{kill, ForCancel, Cancelled},
		{kill, ForUnneeded, Signalled},
		{with(sandbox.LimitMemory), NotStopped, MemoryLimit},
		{with(sandbox.LimitPids), NotStopped, PidsLimit},
		{with(sandbox.LimitCPU), NotStopped, CPULimit},
		{sandbox.Result{Err: errors.New("x")}, ForTimeout, SandboxError},
	} {
		if got := Of(c.res, c.why); got.Status != c.want {
			t.Errorf("Of(%+v, %d) = %v, want %v", c.res, c.why, got.Status, c.want)
		}
	}
}

// Every metric reason is the reason of exactly one status, and the metrics package documents the same set.
func TestMetricReasons(t *testing.T) {
	seen := map[string]Status{}
	for s := Exited; s <= SandboxError; s++ {
		if r := s.MetricReason(); r != "" {
			if prev, dup := seen[r]; dup {
				t.Fatalf("reason %q of both %v and %v", r, prev, s)
			}
			seen[r] = s
		}
	}
	for _, r := range metrics.KillReasons {
		if _, ok := seen[r]; !ok {
			t.Errorf("metric reason %q is not the reason of any status: it can never increase", r)
		}
		delete(seen, r)
	}
	for r := range seen {
		t.Errorf("status reason %q is not in metrics.KillReasons", r)
	}
}
