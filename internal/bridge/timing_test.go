package bridge

import (
	"testing"
	"time"
)

// The backoff table of §6.5.
func TestBackoffTable(t *testing.T) {
	cases := []struct {
		attempt int
		lo, hi  time.Duration
	}{
		{0, 500 * time.Millisecond, 1000 * time.Millisecond},
		{3, 4000 * time.Millisecond, 8000 * time.Millisecond},
		{5, 15000 * time.Millisecond, 30000 * time.Millisecond},
		{40, 15000 * time.Millisecond, 30000 * time.Millisecond},
	}
	for _, c := range cases {
		if got := Backoff(c.attempt, 0); got != c.lo {
			t.Errorf("attempt %d r=0: %v", c.attempt, got)
		}
		if got := Backoff(c.attempt, 0.999999999); got >= c.hi || got < c.hi-time.Millisecond {
			t.Errorf("attempt %d r→1: %v", c.attempt, got)
		}
	}
	if HeartbeatInterval(60000) != 30*time.Second || HeartbeatInterval(10) != 25*time.Millisecond {
		t.Fatal("heartbeat interval")
	}
}

// The policy digest vectors of §8.1.
func TestPolicyDigestVectors(t *testing.T) {
	if d := PolicyDigest(DefaultPolicy, false, nil); d != "003c8a3e2ef28bf00cc594b4f5598eb94e891dbb36ad13db8af13ce608994582" {
		t.Fatal(d)
	}
	if d := PolicyDigest(DefaultPolicy, true, []string{"pypi.org", "api.github.com", "pypi.org"}); d != "93350e09c8e4f3257e53607cc40b726c7634fc8da8ae83bb3986e5e82370e7c9" {
		t.Fatal(d)
	}
}
