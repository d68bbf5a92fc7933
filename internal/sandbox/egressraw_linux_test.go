package sandbox

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// stubEgress answers every connection to a block's egress listener with
// "proxy" and closes it.
type stubEgress struct{ wg sync.WaitGroup }

func (e *stubEgress) Serve(l net.Listener) {
	e.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("proxy"))
			c.Close()
		}
	})
}

func (e *stubEgress) Close() error { e.wg.Wait(); return nil }

// A block of a run with egress reaches the listener the helper made in its
// namespace (127.0.0.1:3128, served by the server) and no other port
// (Landlock), with the raw helper as its init like any other block.
func TestEgressBlockOnTheRawHelper(t *testing.T) {
	nativeSandbox(t)
	s, err := New(Config{Mode: ModeNative, Egress: func(string, []string) (EgressRun, error) { return &stubEgress{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Report().Ready {
		skipOrFail(t, "native sandbox with egress not ready: %v", s.Report().Missing)
	}
	o := mustRun(t, s, py(`
import os, socket
print(open("/proc/1/comm").read().strip())
for port in (3128, 3129):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port)); print(port, s.recv(16).decode())
    except OSError as e: print(port, "denied", e.errno)
`)...)
	want := []string{"codellm-raw", "3128 proxy", "3129 denied " + strconv.Itoa(13)} // EACCES
	got := strings.Split(strings.TrimSpace(o.Stdout), "\n")
	if goHelperForTests && len(got) > 0 {
		want[0] = got[0] // the Go helper, exec'd as /proc/self/fd/N
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the block printed %q (stderr %q), want %q", got, o.Stderr, want)
	}
}
