package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// A runtime container is bounded (issue 35 item 3: a run used 1.5 GiB with a 512 MiB limit and 600
// processes with 256): its memory and tasks are capped by the engine, and a run that wants more memory
// than the container has is killed rather than served. Differential: the same run completes in a
// container without the bound (its own sandbox has no cgroup there to stop it).
func TestDockerContainerLimits(t *testing.T) {
	const growCode = `s=a; for ((i=0;i<27;i++)); do s=$s$s; done; echo grown ${#s}` // a 128 MiB string
	grow := bashCall(fmt.Sprintf("limits-%d", time.Now().UnixNano()), growCode)
	d := newTestDockerWith(t, func(c *DockerConfig) { c.Memory, c.Pids = 96<<20, 80 })
	t.Cleanup(func() { _ = d.Reset(context.Background(), grow.SessionID) })
	if got := stdoutOf(t, d, bashCall(grow.SessionID, "echo up")); got != "up\n" {
		t.Fatalf("a small run in a bounded container: %q", got)
	}
	out, err := d.cli(context.Background(), nil, "container", "inspect", "--format", "{{.HostConfig.Memory}} {{.HostConfig.MemorySwap}} {{.HostConfig.PidsLimit}}", ContainerName(grow.SessionID))
	if err != nil || strings.TrimSpace(string(out)) != fmt.Sprintf("%d %d 80", 96<<20, 96<<20) {
		t.Fatalf("container limits %q (%v), want memory and memory+swap 96 MiB, 80 tasks", out, err)
	}
	if got, err := runStdout(d, grow); err == nil && strings.HasPrefix(got, "grown") {
		t.Fatalf("a run grew a 128 MiB string in a container bounded to 96 MiB: %q", got)
	}
	unbounded := newTestDockerWith(t, func(c *DockerConfig) { c.Memory, c.Pids = 4<<30, 4096 })
	free := bashCall(grow.SessionID+"-free", growCode)
	t.Cleanup(func() { _ = unbounded.Reset(context.Background(), free.SessionID) })
	if got, err := runStdout(unbounded, free); err != nil || got != "grown 134217728\n" {
		t.Fatalf("the same run with room: %q %v", got, err)
	}
}

// runStdout is stdoutOf without failing the test.
func runStdout(d *Docker, call RunnerCall) (string, error) {
	o, err := d.Execute(context.Background(), call)
	if err != nil {
		return "", err
	}
	run, _ := o.Get("run")
	ro, _ := run.(*bridge.Object)
	if ro == nil {
		return "", errors.New("reply without run")
	}
	s, _ := ro.Get("stdout")
	str, _ := s.(string)
	return str, nil
}

// A session's container goes once idle for the session TTL (issue 35 item 3: every exec of a new session
// left a container running codellm serve for good), and at the bound of session containers a new session
// is a clean 429 unless an idle one can make room.
func TestDockerSessionContainersAreBounded(t *testing.T) {
	d := newTestDockerWith(t, func(c *DockerConfig) { c.Sessions = DockerSessions{TTL: 2 * time.Second, Max: 1, EvictIdle: time.Hour} })
	a, b := fmt.Sprintf("bounded-a-%d", time.Now().UnixNano()), fmt.Sprintf("bounded-b-%d", time.Now().UnixNano())
	t.Cleanup(func() { _ = d.Reset(context.Background(), a); _ = d.Reset(context.Background(), b) })
	if got := stdoutOf(t, d, bashCall(a, "echo a")); got != "a\n" {
		t.Fatalf("session a: %q", got)
	}
	_, err := d.Execute(context.Background(), bashCall(b, "echo b"))
	var re *RunError
	if !errors.As(err, &re) || !re.KnownClean || re.Status != http.StatusTooManyRequests || !strings.HasPrefix(re.Message, "too_many_sessions: ") {
		t.Fatalf("a second session at the bound: %v, want a clean 429 too_many_sessions", err)
	}
	if st := containerState(t, d, b); st != "missing" {
		t.Fatalf("the refused session got a container: %s", st)
	}
	for end := time.Now().Add(20 * time.Second); containerState(t, d, a) != "missing"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("session a's container outlived its 2 s TTL by 20 s")
		}
	}
	if got := stdoutOf(t, d, bashCall(b, "echo b")); got != "b\n" {
		t.Fatalf("session b once a expired: %q", got)
	}
}

// A new supervisor of the same owner removes the stateless containers an earlier one left (a crash
// during their call) and adopts its session containers, which then expire as its own do.
func TestDockerAdoptsWhatAnEarlierWorkerLeft(t *testing.T) {
	owner := fmt.Sprintf("adopt-%d", time.Now().UnixNano())
	d1 := newTestDockerWith(t, func(c *DockerConfig) { c.Owner = owner })
	sid, crashed := owner+"-session", ContainerName("assignment-"+owner)
	t.Cleanup(func() { _ = d1.Reset(context.Background(), sid); _ = d1.remove(context.Background(), crashed) })
	if got := stdoutOf(t, d1, bashCall(sid, "echo kept")); got != "kept\n" {
		t.Fatalf("session: %q", got)
	}
	if err := d1.create(context.Background(), crashed, &d1.stateless); err != nil {
		t.Fatal(err)
	}
	d1.Close()
	d2 := newTestDockerWith(t, func(c *DockerConfig) { c.Owner = owner; c.Sessions.TTL = 2 * time.Second })
	if st := containerState(t, d2, "assignment-"+owner); st != "missing" {
		t.Fatalf("the stateless container a crash left: %s", st)
	}
	for end := time.Now().Add(20 * time.Second); containerState(t, d2, sid) != "missing"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the adopted session container outlived its TTL")
		}
	}
}
