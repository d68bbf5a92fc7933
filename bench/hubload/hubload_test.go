package main

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// The harness's short form, for CI: a small fleet on Redis (one and two replicas) and on the embedded
// store, every phase run. It fails when a client got a wrong or no answer, a simulated worker met a
// protocol error, or the overload phase answered nothing; the figures themselves are benchmarks
// (BENCHMARKS.md), not asserted here.
func TestShortRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds codellm and starts hub processes")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CODELLM_REQUIRE_REDIS") == "1" || os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatal("redis-server not installed")
		}
		t.Skip("redis-server not installed")
	}
	for _, store := range []string{"redis", "bolt"} {
		p := params{store: store, workers: []int{20}, replicas: []int{1, 2}, idle: 2 * time.Second, assignments: 30,
			concurrency: 4, overload: 3 * time.Second}
		res, err := run(p)
		if err != nil {
			t.Fatalf("%s: %v", store, err)
		}
		for _, r := range res.Rows {
			if r.Errors != 0 {
				t.Errorf("%s, %d workers, %d replicas: %d errors", store, r.Workers, r.Replicas, r.Errors)
			}
		}
		if o := res.Overload; o == nil || o.Answered == 0 {
			t.Errorf("%s: the overload phase answered nothing: %+v", store, o)
		}
		t.Logf("%s:\n%s", store, markdown(res))
	}
}
