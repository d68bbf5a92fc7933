package redisstore_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

const (
	adminToken = "admin-token-for-redis-tests"
	apiKey     = "client-key-for-redis-tests"
)

// reply is one HTTP reply; status -1 is a transport failure.
type reply struct {
	status int
	body   []byte
}

// sigWorker is a signing bridge worker speaking the wire protocol to a list
// of hub replicas (their …/v1 bases), moving to the next replica when the
// current one stops answering — what a worker behind a load balancer sees.
type sigWorker struct {
	t           testing.TB
	id          string
	priv        ed25519.PrivateKey
	pubPEM      string
	credential  string
	incarnation string
	caps        bridge.Capabilities
	client      *http.Client

	mu    sync.Mutex
	bases []string
	cur   int
}

func newSigWorker(t testing.TB, id string, bases ...string) *sigWorker {
	pub, priv, err := bridge.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := bridge.MarshalPublicKeyPEM(pub)
	return &sigWorker{t: t, id: id, priv: priv, pubPEM: pem, incarnation: bridge.NewID(), bases: bases,
		caps:   bridge.Capabilities{SandboxProfile: "codellm-embedded", Runtimes: []string{"python", "bash"}},
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: false}, Timeout: 60 * time.Second}}
}

func (w *sigWorker) base() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bases[w.cur]
}

// failover moves to the next replica.
func (w *sigWorker) failover() {
	w.mu.Lock()
	w.cur = (w.cur + 1) % len(w.bases)
	w.mu.Unlock()
}

func (w *sigWorker) close() { w.client.CloseIdleConnections() }

func do(c *http.Client, req *http.Request) reply {
	resp, err := c.Do(req)
	if err != nil {
		return reply{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, b}
}

func adminPost(t testing.TB, base, path string, body any) reply {
	t.Helper()
	b, _ := bridge.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	return do(http.DefaultClient, req)
}

// pair creates a code on one replica and redeems it on the worker's current one.
func (w *sigWorker) pair(adminBase string) {
	w.t.Helper()
	r := adminPost(w.t, adminBase, bridge.PathPairings(), bridge.CreatePairingRequest{WorkerID: w.id})
	// Right after Redis restarted, a pooled connection's first command can fail: 503, which callers retry.
	for end := time.Now().Add(5 * time.Second); r.status == 503 && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		r = adminPost(w.t, adminBase, bridge.PathPairings(), bridge.CreatePairingRequest{WorkerID: w.id})
	}
	if r.status != 200 {
		w.t.Fatalf("create pairing: %d %s", r.status, r.body)
	}
	var pr bridge.CreatePairingResponse
	_ = json.Unmarshal(r.body, &pr)
	b, _ := bridge.Marshal(bridge.RedeemRequest{ProtocolVersion: 1, WorkerID: w.id, Code: pr.Code, PublicKey: w.pubPEM})
	req, _ := http.NewRequest(http.MethodPost, w.base()+bridge.PathRedeem(), bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	r = do(w.client, req)
	if r.status != 200 {
		w.t.Fatalf("redeem: %d %s", r.status, r.body)
	}
	var cr bridge.CredentialResponse
	_ = json.Unmarshal(r.body, &cr)
	w.credential = cr.Credential
}

// send signs and posts body to the current replica.
func (w *sigWorker) send(ctx context.Context, path string, body any) reply {
	b, err := bridge.Marshal(body)
	if err != nil {
		w.t.Error(err)
		return reply{status: -1}
	}
	base := w.base()
	u, _ := url.Parse(base + path)
	p := bridge.SignRequest(w.priv, w.credential, http.MethodPost, u.EscapedPath(), b, time.Now())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	p.Apply(req.Header)
	return do(w.client, req)
}

// sendRetry sends, failing over to the next replica on transport errors,
// the way a worker retries a settlement until it lands (§6.6).
func (w *sigWorker) sendRetry(ctx context.Context, path string, body any) reply {
	for i := 0; ; i++ {
		r := w.send(ctx, path, body)
		if r.status != -1 || ctx.Err() != nil || i >= 20 {
			return r
		}
		w.failover()
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *sigWorker) register(ctx context.Context) reply {
	return w.sendRetry(ctx, bridge.PathRegister(), bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: w.id, IncarnationID: w.incarnation, Capabilities: w.caps})
}

func (w *sigWorker) lease(ctx context.Context, waitMs float64) (reply, *bridge.Assignment) {
	r := w.sendRetry(ctx, bridge.PathLease(w.id), bridge.LeaseRequest{ProtocolVersion: 1, WaitMs: &waitMs, IncarnationID: w.incarnation})
	var lr bridge.LeaseResponse
	if r.status == 200 {
		_ = json.Unmarshal(r.body, &lr)
	}
	return r, lr.Assignment
}

func (w *sigWorker) ack(ctx context.Context, a *bridge.Assignment) reply {
	return w.sendRetry(ctx, bridge.PathAck(w.id, a.AssignmentID), bridge.AckRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, Generation: a.Generation, LeaseToken: a.LeaseToken})
}

func (w *sigWorker) settle(ctx context.Context, a *bridge.Assignment) reply {
	return w.sendRetry(ctx, bridge.PathSettle(w.id, a.AssignmentID), runnerReply(a, w.incarnation))
}

// next leases (registering first when register) until an assignment comes, failing the test on a refusal
// or when ctx ends.
func (w *sigWorker) next(ctx context.Context, register bool) *bridge.Assignment {
	w.t.Helper()
	for ctx.Err() == nil {
		if register {
			if r := w.register(ctx); r.status != 200 {
				w.t.Fatalf("register: %d %s", r.status, r.body)
			}
		}
		if r, as := w.lease(ctx, 2000); r.status != 200 {
			w.t.Fatalf("lease: %d %s", r.status, r.body)
		} else if as != nil {
			return as
		}
	}
	w.t.Fatal("no assignment")
	return nil
}

// serve runs the worker loop until stop: register, long-poll, ack, settle.
// onSettle sees every settle reply.
func (w *sigWorker) serve(waitMs float64, onSettle func(a *bridge.Assignment, r reply)) (stop func()) {
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
			r, a := w.lease(ctx, waitMs)
			if r.status != 200 || a == nil {
				continue
			}
			if w.ack(ctx, a).status != 200 {
				continue
			}
			// A settle under way finishes after stop: the settlement is stored (and its client answered)
			// before the worker hears its 200, so stopping may come in between.
			sr := w.settle(context.WithoutCancel(ctx), a)
			if onSettle != nil {
				onSettle(a, sr)
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// runnerReply answers a sandbox assignment like Piston's /execute, echoing
// the code so every client can check it got its own result.
func runnerReply(a *bridge.Assignment, inc string) bridge.Settlement {
	body, _ := a.Request.Object().Get("body")
	lang, _ := body.(*bridge.Object).Get("language")
	files, _ := body.(*bridge.Object).Get("files")
	code, _ := files.([]any)[0].(*bridge.Object).Get("content")
	out, run := &bridge.Object{}, &bridge.Object{}
	run.Set("stdout", "ran:"+code.(string))
	run.Set("stderr", "")
	run.Set("code", 0.0)
	run.Set("signal", nil)
	run.Set("output", "ran:"+code.(string))
	out.Set("run", run)
	out.Set("language", lang)
	out.Set("version", "3.12.0")
	return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: inc,
		Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)}
}

// execOn posts one /v1/exec to a replica's root URL and returns the stdout.
func execOn(ctx context.Context, root, code string) (string, reply) {
	b, _ := json.Marshal(map[string]string{"lang": "py", "code": code})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, root+"/v1/exec", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	r := do(http.DefaultClient, req)
	var out struct {
		Stdout string `json:"stdout"`
	}
	_ = json.Unmarshal(r.body, &out)
	return out.Stdout, r
}
