package redisstore_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if u := os.Getenv("CODELLM_TEST_REDIS_URL"); u != "" {
		redisURL = u
	} else {
		u, stop, err := startRedis()
		if err != nil {
			redisSkip = err.Error()
		} else {
			redisURL = u
			defer stop()
		}
	}
	defer func() {
		if binDir != "" {
			_ = os.RemoveAll(binDir)
		}
	}()
	// The server's reaper goroutine lives for the whole run.
	ignore := goleak.IgnoreCurrent()
	if code := m.Run(); code != 0 {
		return code
	}
	if err := goleak.Find(ignore); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
		return 1
	}
	return 0
}
