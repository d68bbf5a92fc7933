package sandbox

import (
	"testing"
	"time"
)

// A SIGKILL is put down to RLIMIT_CPU when the block could have reached the
// limit by the kernel's tick-sampled count, even though the precise CPU
// codellm reads is lower under contention (782 ms of a 1 s limit was seen at
// load 26), and not when the program clearly ended itself long before.
func TestCPULimitReached(t *testing.T) {
	for _, c := range []struct {
		cpu, limit time.Duration
		want       bool
	}{
		{1010 * time.Millisecond, time.Second, true},
		{782 * time.Millisecond, time.Second, true}, // the kill seen at load 26
		{500 * time.Millisecond, time.Second, true},
		{499 * time.Millisecond, time.Second, false},
		{30 * time.Millisecond, time.Second, false}, // kill -9 $$ right away
		{3 * time.Second, 0, false},                 // no CPU limit: never this limit
	} {
		if got := cpuLimitReached(c.cpu, c.limit); got != c.want {
			t.Errorf("cpuLimitReached(%v, %v) = %v, want %v", c.cpu, c.limit, got, c.want)
		}
	}
}
