package server_test

import (
	"net/http"
	"os"
	"testing"
	"time"
)

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(entries)
}

// Requests of every outcome leave no descriptor behind: pipes, workdir handles, status pipes and sockets
// are all closed when the reply is sent (goroutines are checked by goleak in TestMain).
func TestNoDescriptorLeak(t *testing.T) {
	ts := startServer(t, options{})
	bodies := []any{
		chat(block("bash", "echo {}")),
		chat(block("bash", "yes") + block("bash", "head -c 5 >/dev/null; echo {}")),
		chat(block("bash", "echo boom >&2; exit 1")),
		chat(block("python", "import sys\nsys.stdout.write('x'*(2<<20))")),
		chat("```kotlin\nx\n```"),
		`{`,
	}
	round := func() {
		for _, b := range bodies {
			ts.post(t, "/v1/chat/completions", b)
		}
		http.DefaultClient.CloseIdleConnections()
	}
	round() // warm-up: lazily created long-lived descriptors (the sealed helper binary, epoll) exist now
	base := settledFDs(t)
	for i := 0; i < 3; i++ {
		round()
	}
	if n := settledFDs(t); n > base {
		t.Fatalf("open descriptors grew from %d to %d over %d requests", base, n, 3*len(bodies))
	}
}

// settledFDs waits until the descriptor count has been stable for a while (the server closes its side of
// a connection asynchronously after the client does) and returns it.
func settledFDs(t *testing.T) int {
	t.Helper()
	last, stable := openFDs(t), 0
	for deadline := time.Now().Add(30 * time.Second); stable < 5 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		n := openFDs(t)
		if n == last {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	return last
}
