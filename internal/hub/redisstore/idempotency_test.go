package redisstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

type keyedReply struct {
	status   int
	body     string
	replayed bool
}

// keyedExec posts one /v1/exec to a replica, with an Idempotency-Key when key is not empty.
func keyedExec(t *testing.T, root, code, key string) keyedReply {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"lang": "py", "code": code})
	req, _ := http.NewRequest(http.MethodPost, root+"/v1/exec", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return keyedReply{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return keyedReply{resp.StatusCode, string(body), resp.Header.Get("Idempotent-Replayed") == "true"}
}

// slowWorker serves sandbox assignments like sigWorker.serve, holding each for hold before settling,
// and counts them.
func slowWorker(w *sigWorker, hold time.Duration, runs *atomic.Int64) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if r := w.register(ctx); r.status != 200 {
				sleepCtx(ctx, 20*time.Millisecond)
				continue
			}
			r, a := w.lease(ctx, 2000)
			if r.status != 200 || a == nil || w.ack(ctx, a).status != 200 {
				continue
			}
			runs.Add(1)
			sleepCtx(ctx, hold)
			w.sendRetry(ctx, bridge.PathSettle(w.id, a.AssignmentID), runnerReply(a, w.incarnation))
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// Two hub replicas on one Redis agree on Idempotency-Key: a repeat on the other replica replays the
// first response byte for byte, concurrent requests on both replicas run once, and a reused key with
// another body is refused. Without the key the same requests run again (the differential).
func TestIdempotencyAcrossReplicas(t *testing.T) {
	prefix := freshPrefix()
	a := newReplica(t, prefix, true, nil)
	b := newReplica(t, prefix, true, nil)
	w := newSigWorker(t, "idem-vm", a.base)
	defer w.close()
	w.pair(b.base)
	var runs atomic.Int64
	stop := slowWorker(w, 300*time.Millisecond, &runs)
	defer stop()
	for deadline := time.Now().Add(10 * time.Second); keyedExec(t, a.root, "warm-up", "").status != 200; {
		if time.Now().After(deadline) {
			t.Fatal("the worker never became eligible")
		}
		time.Sleep(20 * time.Millisecond)
	}
	runs.Store(0)

	first := keyedExec(t, a.root, "print(1)", "k-1")
	again := keyedExec(t, b.root, "print(1)", "k-1")
	if first.status != 200 || again.status != 200 || again.body != first.body || first.replayed || !again.replayed || runs.Load() != 1 {
		t.Fatalf("first %+v\nagain %+v\nruns %d", first, again, runs.Load())
	}
	if plain := keyedExec(t, b.root, "print(1)", ""); plain.status != 200 || plain.body == first.body || runs.Load() != 2 {
		t.Fatalf("unkeyed repeat %+v runs %d", plain, runs.Load())
	}

	// In flight on both replicas at once: one run, one answer.
	var wg sync.WaitGroup
	replies := make([]keyedReply, 4)
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			root := a.root
			if i%2 == 1 {
				root = b.root
			}
			replies[i] = keyedExec(t, root, "print(2)", "k-2")
		}()
	}
	wg.Wait()
	replayed := 0
	for _, r := range replies {
		if r.status != 200 || r.body != replies[0].body {
			t.Fatalf("concurrent replies differ: %+v", replies)
		}
		if r.replayed {
			replayed++
		}
	}
	if runs.Load() != 3 || replayed != len(replies)-1 {
		t.Fatalf("runs %d (want 3), replayed %d", runs.Load(), replayed)
	}

	if r := keyedExec(t, b.root, "print(3)", "k-1"); r.status != 400 || !bytes.Contains([]byte(r.body), []byte("idempotency_key_reused")) || runs.Load() != 3 {
		t.Fatalf("reused key: %+v runs %d", r, runs.Load())
	}
}
