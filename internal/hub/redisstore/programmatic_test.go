package redisstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// ptcPost posts one programmatic request to a replica's root URL.
func ptcPost(ctx context.Context, root, path, body string, hdr map[string]string) reply {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, root+path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(http.DefaultClient, req)
}

var (
	ptcStart = regexp.MustCompile(`_PTC_START = "([^"]+)"`)
	ptcEnd   = regexp.MustCompile(`_PTC_END = "([^"]+)"`)
	ptcTok   = regexp.MustCompile(`"continuation_token":"([^"]*)"`)
)

// ptcWorkerLoop serves programmatic runs without an interpreter: a program whose history holds no result
// stops at call_001, one that holds it completes; code "HANG" runs until its assignment is cancelled.
// leased is told of every assignment it takes.
func ptcWorkerLoop(ctx context.Context, w *sigWorker, leased chan<- string) {
	for ctx.Err() == nil {
		if r := w.register(ctx); r.status != 200 {
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		r, a := w.lease(ctx, 1000)
		if r.status != 200 || a == nil || w.ack(ctx, a).status != 200 {
			continue
		}
		body, _ := a.Request.Object().Get("body")
		files, _ := body.(*bridge.Object).Get("files")
		program, _ := files.([]any)[0].(*bridge.Object).Get("content")
		src := program.(string)
		leased <- a.AssignmentID
		run := &bridge.Object{}
		run.Set("stderr", "")
		switch {
		case strings.Contains(src, `_ptc_src = "HANG"`):
			for ctx.Err() == nil {
				var c bridge.CancellationResponse
				r := w.send(ctx, bridge.PathCancellation(w.id, a.AssignmentID), bridge.CancellationRequest{ProtocolVersion: 1, IncarnationID: w.incarnation})
				if r.status == 200 && json.Unmarshal(r.body, &c) == nil && c.Cancelled {
					break
				}
				sleepCtx(ctx, 50*time.Millisecond)
			}
			run.Set("stdout", "")
			run.Set("code", nil)
			run.Set("signal", "SIGKILL")
		case strings.Contains(src, `\"tool_name\":`): // the history holds call_001
			run.Set("stdout", "done\n")
			run.Set("code", 0.0)
		default:
			run.Set("stdout", fmt.Sprintf("before\n\n%s\n{\"call_id\": \"call_001\", \"tool_name\": \"t\"}\n{\"q\": 1}\n%s\n",
				ptcStart.FindStringSubmatch(src)[1], ptcEnd.FindStringSubmatch(src)[1]))
			run.Set("code", 0.0)
		}
		out := &bridge.Object{}
		out.Set("run", run)
		w.sendRetry(ctx, bridge.PathSettle(w.id, a.AssignmentID), bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation,
			LeaseToken: a.LeaseToken, IncarnationID: w.incarnation, Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)})
	}
}

// TestProgrammaticAcrossReplicas: an execution started on replica A continues on replica B (its state is
// in the shared store), a retry of that continuation on A gets B's answer without another run, and a
// cancel posted to B stops a run A dispatched — with a poll interval of a minute, only the change feed
// can carry the cancel to A in time.
func TestProgrammaticAcrossReplicas(t *testing.T) {
	prefix := freshPrefix()
	a := newReplica(t, prefix, true, nil)
	b := newReplica(t, prefix, true, nil)
	w := newSigWorker(t, "ptc-vm", a.base)
	defer w.close()
	w.pair(b.base)
	if r := w.register(context.Background()); r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leased := make(chan string, 16)
	done := make(chan struct{})
	go func() { defer close(done); ptcWorkerLoop(ctx, w, leased) }()
	defer func() { cancel(); <-done }()

	first := ptcPost(ctx, a.root, "/v1/exec/programmatic", `{"code":"x","tools":[{"name":"t"}]}`, nil)
	m := ptcTok.FindStringSubmatch(string(first.body))
	if first.status != 200 || m == nil || !strings.Contains(string(first.body), `"tool_calls":[{"id":"call_001","name":"t","input":{"q":1}}],"partial_stdout":"before\n"`) {
		t.Fatalf("first on A: %d %s", first.status, first.body)
	}
	cont := `{"continuation_token":"` + m[1] + `","tool_results":[{"call_id":"call_001","result":"r","is_error":false}]}`
	onB := ptcPost(ctx, b.root, "/v1/exec/programmatic", cont, nil)
	if onB.status != 200 || !strings.Contains(string(onB.body), `"status":"completed","stdout":"done\n"`) {
		t.Fatalf("continuation on B: %d %s", onB.status, onB.body)
	}
	runs := len(leased)
	again := ptcPost(ctx, a.root, "/v1/exec/programmatic", cont, nil)
	if again.status != 200 || string(again.body) != string(onB.body) || len(leased) != runs {
		t.Fatalf("retry on A: %d %s (runs %d → %d), want B's answer %s", again.status, again.body, runs, len(leased), onB.body)
	}
	for len(leased) > 0 {
		<-leased
	}

	hdr := map[string]string{"X-LibreChat-Code-Request-ID": "cross_replica_cancel_1"}
	res := make(chan reply, 1)
	go func() {
		res <- ptcPost(ctx, a.root, "/v1/exec/programmatic", `{"code":"HANG","tools":[{"name":"t"}],"timeout":40000}`, hdr)
	}()
	<-leased // the run is on the worker
	if r := ptcPost(ctx, b.root, "/v1/exec/programmatic/cancel", `{"request_id":"cross_replica_cancel_1"}`, nil); r.status != 202 {
		t.Fatalf("cancel on B: %d %s", r.status, r.body)
	}
	select {
	case r := <-res:
		if r.status != 200 || !strings.Contains(string(r.body), `{"status":"error","error":"Programmatic execution request cancelled"`) {
			t.Fatalf("the cancelled request on A: %d %s", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancel on B did not reach the run on A")
	}
}
