package engine

import (
	"testing"
	"time"
)

// A request's timeout_seconds lowers the server's limit, never raises it; 0 is the limit (§2.6).
func TestEffectiveTimeout(t *testing.T) {
	const limit = 300 * time.Second
	e := New(Config{Timeout: limit}, nil)
	for _, tc := range []struct {
		seconds int
		want    time.Duration
	}{{0, limit}, {-1, limit}, {2, 2 * time.Second}, {300, limit}, {301, limit}, {1 << 30, limit}} {
		if got := e.EffectiveTimeout(tc.seconds); got != tc.want {
			t.Errorf("EffectiveTimeout(%d s) = %v, want %v", tc.seconds, got, tc.want)
		}
	}
}
