package cgroup

import (
	"errors"
	"math"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"run-1", "a", "R_2.b", "block-0", "x.y", "memoryless"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "/", "a/b", "../etc", ".x", "a b", "a\nb", "a\x00", "é", "supervisor", "cgroup.kill", "memory.max", "pids.max", "tasks.x"} {
		if err := ValidateName(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, ok := range []Limits{{}, {Memory: 1 << 20, Pids: 1, CPUs: 0.01}, {Memory: 1 << 40, Pids: 1 << 20, CPUs: 64}} {
		if err := ok.validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for _, bad := range []Limits{{Memory: -1}, {Memory: 4096}, {Pids: -1}, {CPUs: -0.5}, {CPUs: math.NaN()}, {CPUs: math.Inf(1)}, {CPUs: 0.001}, {CPUs: 1e9}} {
		if err := bad.validate(); !errors.Is(err, ErrInvalidLimits) {
			t.Errorf("%+v: %v, want ErrInvalidLimits", bad, err)
		}
	}
	if q := (Limits{CPUs: 1.5}).quotaUs(); q != 150000 {
		t.Errorf("quota %d", q)
	}
}

func TestUnavailableErrorMessage(t *testing.T) {
	err := error(&UnavailableError{V2: "no write access to /sys/fs/cgroup/x: run as root or with Delegate=yes", V1: "not mounted"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatal("does not wrap ErrUnavailable")
	}
	want := "cgroup: no usable hierarchy: cgroup v2: no write access to /sys/fs/cgroup/x: run as root or with Delegate=yes; cgroup v1: not mounted"
	if err.Error() != want {
		t.Errorf("got %q", err.Error())
	}
}
