package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/testhelp"
)

// serving fails the test when the worker loop has ended: one client's doing must not stop it.
func (r *running) serving(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		r.once.Do(func() { r.result = err })
		t.Fatalf("the worker stopped (exit %d: %v): one client took it offline for everyone", ExitCode(err), err)
	default:
	}
}

// waitLog waits until the worker's log contains s (a hang bound, not a timed assertion).
func (r *running) waitLog(t *testing.T, s string) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !strings.Contains(r.logs.String(), s); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the worker never logged %q", s)
		}
	}
}

// A client that gives up mid-exec in a stateful session (the hub cancels the assignment, the worker aborts
// the run after it reached the runner) quarantines that session, not the worker (issue 35 item 2): the
// session is discarded locally and stays fenced on the hub (409 session_quarantined), and the worker
// serves the next request. Before, it exited 5 and a systemd unit left it down.
func TestClientGivingUpMidExecKeepsTheWorker(t *testing.T) {
	h := newTestHub(t, nil, boltstore.WithGrace(time.Second))
	id, path := h.pair(t, "giveup")
	r := start(t, baseConfig(h, id, path, newEmbedded(t, true)))
	h.waitReady(t, "giveup")
	rep := h.exec(t, "bash", "echo kept > state.txt; echo wrote", nil)
	sid, _ := decodeExec(t, rep)["session_id"].(string)
	if rep.status != 200 || sid == "" {
		t.Fatalf("first exec: %d %s", rep.status, rep.body)
	}
	execIn := func(ctx context.Context, sid, code string, hdr map[string]string) reply {
		b, _ := json.Marshal(map[string]string{"lang": "bash", "code": code, "session_id": sid})
		return h.client(t, ctx, "/v1/exec", string(b), hdr)
	}
	ctx, giveUp := context.WithCancel(context.Background())
	done := make(chan reply, 1)
	marker := fmt.Sprintf("30.%d%06d", os.Getpid(), time.Now().UnixNano()%1e6)
	go func() {
		done <- execIn(ctx, sid, "echo changed > state.txt; sleep "+marker, map[string]string{"X-Codellm-Timeout-Ms": "4000"})
	}()
	testhelp.WaitCmdline(t, "sleep\x00"+marker, 1, 20*time.Second) // the run is under way in the runner
	giveUp()
	<-done
	r.waitLog(t, "quarantined locally")
	r.serving(t)
	if rep := execIn(context.Background(), sid, "cat state.txt", nil); rep.status != 409 || !strings.Contains(string(rep.body), "session_quarantined") {
		t.Fatalf("the given-up session: %d %s, want 409 session_quarantined", rep.status, rep.body)
	}
	// The hub keeps the worker's lock until the abandoned assignment's deadline plus its grace.
	var next reply
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if next = h.exec(t, "bash", "echo next", nil); next.status == 200 {
			break
		}
	}
	if m := decodeExec(t, next); next.status != 200 || m["stdout"] != "next\n" {
		t.Fatalf("the next client's exec: %d %s", next.status, next.body)
	}
	r.serving(t)
	// The hub redelivers the acknowledged, unsettled assignment until it expires: it ran once.
	if n := strings.Count(r.logs.String(), "quarantined locally"); n != 1 {
		t.Errorf("the given-up assignment ran %d times, want once:\n%s", n, r.logs.String())
	}
}

// One tenant opening more sessions than the worker's runner holds neither quarantines the worker nor locks
// other tenants out (issue 35 item 2: at the 65th session the runner's 429 was taken as ambiguous and the
// worker exited 5; every hub tenant was one in-process owner, so no per-credential cap applied). Each
// tenant now has its share of the table (half of it), a session beyond it is a clean 429
// too_many_sessions, and another tenant still gets a session.
func TestOneTenantsSessionsKeepTheWorker(t *testing.T) {
	const otherKey = "client-key-of-another-tenant"
	h := newTestHub(t, func(c *hub.Config) {
		c.ClientKeys = append(c.ClientKeys, hub.ClientKey{Key: otherKey, TenantID: "other"})
	})
	id, path := h.pair(t, "tenants")
	sup := newEmbeddedWith(t, true, func(c *runner.Config) { c.MaxSessions = 4 })
	r := start(t, baseConfig(h, id, path, sup))
	h.waitReady(t, "tenants")
	opened := 0
	for i := range 5 { // more than the whole table
		rep := h.exec(t, "bash", "echo hi", nil)
		switch {
		case rep.status == 200:
			opened++
		case rep.status == 429 && strings.Contains(string(rep.body), "too_many_sessions"):
		default:
			t.Fatalf("session %d of one tenant: %d %s", i+1, rep.status, rep.body)
		}
		r.serving(t)
	}
	if opened != 2 {
		t.Errorf("one tenant opened %d sessions, want its share of the table (2 of 4)", opened)
	}
	b, _ := json.Marshal(map[string]string{"lang": "bash", "code": "echo other"})
	rep := h.clientAs(t, context.Background(), otherKey, "/v1/exec", string(b), nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "other\n" {
		t.Fatalf("another tenant after the first filled its share: %d %s", rep.status, rep.body)
	}
	r.serving(t)
}
