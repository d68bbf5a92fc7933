package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// simWorker is a bridge worker without a sandbox: it pairs, registers before every lease as the protocol
// says (§6.2), long-polls, acknowledges, "runs" for runFor and settles a Piston-shaped result echoing the
// code, so that clients can check they got their own answer. Every request is signed like a real
// worker's, so the hub pays for verification and nonces as it would in production.
type simWorker struct {
	id, incarnation string
	priv            ed25519.PrivateKey
	pubPEM          string
	credential      string
	expires         time.Time
	base            string // …/v1 of the replica it talks to
	client          *http.Client
	runFor          time.Duration
	waitMs          float64
	stats           *workerStats
}

// workerStats are counted over all workers.
type workerStats struct {
	leased, settled, errors atomic.Int64
}

func newSimWorker(id, base string, client *http.Client, runFor time.Duration, st *workerStats) *simWorker {
	pub, priv, _ := bridge.GenerateKey()
	pem, _ := bridge.MarshalPublicKeyPEM(pub)
	return &simWorker{id: id, incarnation: bridge.NewID(), priv: priv, pubPEM: pem, base: base, client: client,
		runFor: runFor, waitMs: 25000, stats: st}
}

// post sends a JSON body (signed unless unsigned) and decodes a 200 reply into out.
func (w *simWorker) post(ctx context.Context, path string, body any, out any, unsigned bool, header map[string]string) (int, error) {
	b, err := bridge.Marshal(body)
	if err != nil {
		return 0, err
	}
	var req *http.Request
	if unsigned {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, w.base+path, bytes.NewReader(b))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	} else {
		req, err = bridge.NewSignedRequest(ctx, w.base, path, b, w.credential, w.priv, time.Now())
	}
	if err != nil {
		return 0, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%s: %d %s", path, resp.StatusCode, raw)
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}

// pair creates a pairing code with the admin token and redeems it.
func (w *simWorker) pair(ctx context.Context, adminToken string) error {
	var pr bridge.CreatePairingResponse
	if _, err := w.post(ctx, bridge.PathPairings(), bridge.CreatePairingRequest{WorkerID: w.id}, &pr, true,
		map[string]string{"Authorization": "Bearer " + adminToken}); err != nil {
		return err
	}
	var cr bridge.CredentialResponse
	if _, err := w.post(ctx, bridge.PathRedeem(), bridge.RedeemRequest{ProtocolVersion: 1, WorkerID: w.id, Code: pr.Code, PublicKey: w.pubPEM}, &cr, true, nil); err != nil {
		return err
	}
	return w.setCredential(cr)
}

func (w *simWorker) setCredential(cr bridge.CredentialResponse) error {
	exp, err := bridge.ParseTime(cr.ExpiresAt)
	if err != nil {
		return err
	}
	w.credential, w.expires = cr.Credential, exp
	return nil
}

// register registers (the heartbeat), refreshing the credential first when it is due (§4.2).
func (w *simWorker) register(ctx context.Context) error {
	if time.Until(w.expires) < 90*time.Second {
		var cr bridge.CredentialResponse
		if _, err := w.post(ctx, bridge.PathRefresh(w.id), map[string]any{"protocolVersion": 1}, &cr, false, nil); err != nil {
			return err
		}
		if err := w.setCredential(cr); err != nil {
			return err
		}
	}
	caps := bridge.Capabilities{SandboxProfile: "hubload", Runtimes: []string{"python", "bash"}}
	_, err := w.post(ctx, bridge.PathRegister(), bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: w.id, IncarnationID: w.incarnation, Capabilities: caps}, nil, false, nil)
	return err
}

// run is the worker loop until ctx ends.
func (w *simWorker) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.cycle(ctx); err != nil && ctx.Err() == nil {
			w.stats.errors.Add(1)
			sleep(ctx, 500*time.Millisecond)
		}
	}
}

// cycle is one register + lease (+ ack, run, settle).
func (w *simWorker) cycle(ctx context.Context) error {
	if err := w.register(ctx); err != nil {
		return err
	}
	var lr bridge.LeaseResponse
	wait := w.waitMs
	if _, err := w.post(ctx, bridge.PathLease(w.id), bridge.LeaseRequest{ProtocolVersion: 1, WaitMs: &wait, IncarnationID: w.incarnation}, &lr, false, nil); err != nil {
		return err
	}
	a := lr.Assignment
	if a == nil {
		return nil
	}
	w.stats.leased.Add(1)
	ack := bridge.AckRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, Generation: a.Generation, LeaseToken: a.LeaseToken}
	if _, err := w.post(ctx, bridge.PathAck(w.id, a.AssignmentID), ack, nil, false, nil); err != nil {
		return err
	}
	sleep(ctx, w.runFor)
	if _, err := w.post(context.WithoutCancel(ctx), bridge.PathSettle(w.id, a.AssignmentID), settlement(a, w.incarnation), nil, false, nil); err != nil {
		return err
	}
	w.stats.settled.Add(1)
	return nil
}

// settlement answers a sandbox assignment the way Piston's /execute does, echoing the code.
func settlement(a *bridge.Assignment, inc string) bridge.Settlement {
	code := ""
	if body, ok := a.Request.Object().Get("body"); ok {
		if files, ok := body.(*bridge.Object).Get("files"); ok {
			if fs, ok := files.([]any); ok && len(fs) > 0 {
				c, _ := fs[0].(*bridge.Object).Get("content")
				code, _ = c.(string)
			}
		}
	}
	run := &bridge.Object{}
	run.Set("stdout", "ran:"+code)
	run.Set("stderr", "")
	run.Set("code", 0.0)
	run.Set("signal", nil)
	run.Set("output", "ran:"+code)
	out := &bridge.Object{}
	out.Set("run", run)
	out.Set("language", "python")
	out.Set("version", "3.12.0")
	return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: inc,
		Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
