package worker

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// pair → run → python through /v1/exec and through /v1/chat/completions, all in one process.
func TestPairRunExecAndChat(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "my:vm")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity file: %v %v", fi, err)
	}
	if _, err := LoadIdentity(path, "my:vm"); err != nil {
		t.Fatal(err)
	}
	r := start(t, baseConfig(h, id, path, newEmbedded(t, false)))
	h.waitReady(t, "my:vm")

	rep := h.exec(t, "py", "print(6*7)", nil)
	m := decodeExec(t, rep)
	if rep.status != 200 || m["stdout"] != "42\n" {
		t.Fatalf("exec: %d %s", rep.status, rep.body)
	}
	rep = h.exec(t, "py", "import sys; sys.stderr.write('boom'); sys.exit(3)", nil)
	m = decodeExec(t, rep)
	if rep.status != 200 || m["stderr"] != "boom" {
		t.Fatalf("exec failing program: %d %s", rep.status, rep.body)
	}

	chat := `{"model":"codellm","messages":[{"role":"user","content":"` +
		"```python\\nimport json; print(json.dumps({'answer': 'six times seven is %d' % (6*7)}))\\n```" + `"}]}`
	rep = h.client(t, t.Context(), "/v1/chat/completions", chat, nil)
	if rep.status != 200 || !strings.Contains(string(rep.body), "six times seven is 42") || !strings.Contains(string(rep.body), `"object":"chat.completion"`) {
		t.Fatalf("chat: %d %s", rep.status, rep.body)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("clean stop: %v", err)
	}
}

// Backoff follows §6.5's table.
func TestBackoffTable(t *testing.T) {
	for _, c := range []struct {
		attempt int
		lo, hi  time.Duration
	}{{0, 500 * time.Millisecond, time.Second}, {3, 4 * time.Second, 8 * time.Second}, {5, 15 * time.Second, 30 * time.Second}, {40, 15 * time.Second, 30 * time.Second}} {
		lo := Backoff(c.attempt, 0, time.Second, 30*time.Second)
		hi := Backoff(c.attempt, 0.999999, time.Second, 30*time.Second)
		if lo != c.lo || hi > c.hi || hi < c.hi-time.Millisecond {
			t.Errorf("attempt %d: [%v, %v], want [%v, %v)", c.attempt, lo, hi, c.lo, c.hi)
		}
	}
}

// §8.1 policy digest vectors and §5's identity file name vector.
func TestVectors(t *testing.T) {
	if d := PolicyDigest("", false, nil); d != "003c8a3e2ef28bf00cc594b4f5598eb94e891dbb36ad13db8af13ce608994582" {
		t.Errorf("no commands: %s", d)
	}
	if d := PolicyDigest("default-deny", true, []string{"pypi.org", "api.github.com", "pypi.org"}); d != "93350e09c8e4f3257e53607cc40b726c7634fc8da8ae83bb3986e5e82370e7c9" {
		t.Errorf("commands: %s", d)
	}
	if n := IdentityFileName("my:vm"); n != "my_vm-6c2611a7f97e4177.json" {
		t.Errorf("file name %s", n)
	}
	if n := IdentityFileName("my-vm"); n != "my-vm.json" {
		t.Errorf("file name %s", n)
	}
	if ExitCode(nil) != 0 || ExitCode(ErrAuth) != 3 || ExitCode(errors.Join(ErrFenced, errors.New("x"))) != 4 || ExitCode(ErrQuarantined) != 5 || ExitCode(errors.New("x")) != 1 {
		t.Error("exit codes")
	}
	_ = http.StatusOK
}

// The first stop request drains: no new lease, but the running assignment still completes and settles.
func TestDrainFinishesRunningAssignment(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "drain")
	r := start(t, baseConfig(h, id, path, newEmbedded(t, false)))
	h.waitReady(t, "drain")
	got := make(chan reply, 1)
	go func() { got <- h.exec(t, "bash", "sleep 2; echo finished", nil) }()
	time.Sleep(700 * time.Millisecond)
	r.drain()
	rep := <-got
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "finished\n" {
		t.Fatalf("drained assignment: %d %s", rep.status, rep.body)
	}
	if err := r.wait(t, 10*time.Second); err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// requiresReadyConfirmation: the worker confirms every registration generation with /ready, so the hub
// dispatches to it.
func TestReadyConfirmation(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "rdy")
	cfg := baseConfig(h, id, path, newEmbedded(t, false))
	cfg.RequireReady = true
	r := start(t, cfg)
	st := h.waitReady(t, "rdy")
	if caps, _ := st.Capabilities.Canonical(); !strings.Contains(string(caps), `"requiresReadyConfirmation":true`) {
		t.Fatalf("capabilities %s", caps)
	}
	rep := h.exec(t, "bash", "echo confirmed", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "confirmed\n" {
		t.Fatalf("exec: %d %s", rep.status, rep.body)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
