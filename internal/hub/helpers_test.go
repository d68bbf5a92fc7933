package hub

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/hub/filestore"
)

func TestMain(m *testing.M) {
	// Re-exec mode: the test binary becomes a real `codellm hub` process.
	if os.Getenv("CODELLM_HUB_TEST_PROCESS") == "1" {
		os.Exit(RunCLI(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

const (
	adminToken = "admin-token-for-tests"
	apiKey     = "client-key-for-tests"
)

type testHub struct {
	*Hub
	srv   *httptest.Server
	base  string // .../v1
	store *boltstore.Store
}

func newTestHub(t testing.TB, mod func(*Config), opts ...boltstore.Option) *testHub {
	t.Helper()
	return newTestHubOver(t, mod, nil, opts...)
}

// newTestHubOver is newTestHub whose hub sees the store through wrap (nil: as it is).
func newTestHubOver(t testing.TB, mod func(*Config), wrap func(*boltstore.Store) Store, opts ...boltstore.Option) *testHub {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "bridge.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{AdminToken: adminToken, ClientKeys: []ClientKey{{Key: apiKey, TenantID: "default"}}, PollInterval: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	if cfg.Files == nil {
		// As `codellm hub` composes it: the index in the hub's store, the bytes in a directory.
		blobs, err := filestore.OpenDirBlobs(filepath.Join(t.TempDir(), "files"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Files = filestore.NewIndexed(st.Backend(), blobs, cfg.FileLimits)
	}
	var seen Store = st
	if wrap != nil {
		seen = wrap(st)
	}
	h, err := New(cfg, seen)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
		_ = st.Close()
	})
	return &testHub{Hub: h, srv: srv, base: srv.URL + "/v1", store: st}
}

// reply is a decoded HTTP reply.
type reply struct {
	status int
	body   []byte
	header http.Header
}

func (r reply) code() bridge.Code { return bridge.DecodeError(r.status, r.body).Code }

func doHTTP(t testing.TB, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, b, resp.Header}
}

func (h *testHub) admin(t testing.TB, method, path string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := bridge.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, h.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	return doHTTP(t, req)
}

func (h *testHub) client(t testing.TB, path string, body string, hdr map[string]string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return doHTTP(t, req)
}

// testWorker signs like a reference worker: canonical bodies, Ed25519 proofs.
type testWorker struct {
	t           testing.TB
	base        string
	id          string
	priv        ed25519.PrivateKey
	pubPEM      string
	credential  string
	incarnation string
	caps        bridge.Capabilities
	// test hooks
	timestamp  func() time.Time
	nonce      string
	signPrefix string       // path prefix a proxy stripped before the hub saw it
	httpc      *http.Client // nil: http.DefaultClient
}

func newWorker(t testing.TB, h *testHub, id string) *testWorker {
	t.Helper()
	pub, priv, _ := bridge.GenerateKey()
	pem, _ := bridge.MarshalPublicKeyPEM(pub)
	return &testWorker{t: t, base: h.base, id: id, priv: priv, pubPEM: pem, incarnation: bridge.NewID(),
		caps: bridge.Capabilities{SandboxProfile: "codellm-embedded", Runtimes: []string{"python", "bash"}}}
}

// pair runs A1 and redeem.
func (w *testWorker) pair(h *testHub) {
	w.t.Helper()
	r := h.admin(w.t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: w.id})
	if r.status != 200 {
		w.t.Fatalf("create pairing: %d %s", r.status, r.body)
	}
	var pr bridge.CreatePairingResponse
	_ = json.Unmarshal(r.body, &pr)
	r = w.redeem(pr.Code, w.pubPEM)
	if r.status != 200 {
		w.t.Fatalf("redeem: %d %s", r.status, r.body)
	}
	var cr bridge.CredentialResponse
	_ = json.Unmarshal(r.body, &cr)
	w.credential = cr.Credential
}

func (w *testWorker) redeem(code, pub string) reply {
	b, _ := bridge.Marshal(bridge.RedeemRequest{ProtocolVersion: 1, WorkerID: w.id, Code: code, PublicKey: pub})
	req, _ := http.NewRequest(http.MethodPost, w.base+bridge.PathRedeem(), bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	return doHTTP(w.t, req)
}

// send signs and posts a body (a struct, or raw bytes sent and signed as is).
func (w *testWorker) send(ctx context.Context, path string, body any) reply {
	w.t.Helper()
	var b []byte
	switch v := body.(type) {
	case []byte:
		b = v
	default:
		var err error
		if b, err = bridge.Marshal(body); err != nil {
			w.t.Fatal(err)
		}
	}
	u, _ := url.Parse(w.base + path)
	now := time.Now()
	if w.timestamp != nil {
		now = w.timestamp()
	}
	p := bridge.SignRequest(w.priv, w.credential, http.MethodPost, w.signPrefix+u.EscapedPath(), b, now)
	if w.nonce != "" {
		p.Nonce = w.nonce
		p.Signature = bridge.Sign(w.priv, bridge.SigningString("POST", w.signPrefix+u.EscapedPath(), p.Timestamp, p.Nonce, b, w.credential))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.base+path, bytes.NewReader(b))
	p.Apply(req.Header)
	c := w.httpc
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{status: -1, body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, rb, resp.Header}
}

func (w *testWorker) register() (reply, *bridge.RegisterResponse) {
	r := w.send(context.Background(), bridge.PathRegister(), bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: w.id, IncarnationID: w.incarnation, Capabilities: w.caps})
	var rr bridge.RegisterResponse
	if r.status == 200 {
		_ = json.Unmarshal(r.body, &rr)
	}
	return r, &rr
}

func (w *testWorker) mustRegister() *bridge.RegisterResponse {
	w.t.Helper()
	r, rr := w.register()
	if r.status != 200 {
		w.t.Fatalf("register: %d %s", r.status, r.body)
	}
	return rr
}

func (w *testWorker) lease(ctx context.Context, waitMs float64) (reply, *bridge.Assignment) {
	r := w.send(ctx, bridge.PathLease(w.id), bridge.LeaseRequest{ProtocolVersion: 1, WaitMs: &waitMs, IncarnationID: w.incarnation})
	var lr bridge.LeaseResponse
	if r.status == 200 {
		_ = json.Unmarshal(r.body, &lr)
	}
	return r, lr.Assignment
}

// mustLease leases until an assignment arrives (registering before each
// poll, as a worker does).
func (w *testWorker) mustLease() *bridge.Assignment {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		w.mustRegister()
		r, a := w.lease(context.Background(), 200)
		if r.status != 200 {
			w.t.Fatalf("lease: %d %s", r.status, r.body)
		}
		if a != nil {
			return a
		}
	}
	w.t.Fatal("no assignment within 10s")
	return nil
}

func (w *testWorker) ack(a *bridge.Assignment) reply {
	return w.send(context.Background(), bridge.PathAck(w.id, a.AssignmentID), bridge.AckRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, Generation: a.Generation, LeaseToken: a.LeaseToken})
}

func fulfilled(a *bridge.Assignment, inc string, result string) bridge.Settlement {
	r, _ := bridge.RawFromJSON([]byte(result))
	return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: inc, Status: bridge.StatusFulfilled, Result: r}
}

func rejected(a *bridge.Assignment, inc string, msg string) bridge.Settlement {
	return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: inc, Status: bridge.StatusRejected, Error: &msg}
}

func (w *testWorker) settle(a *bridge.Assignment, s any) reply {
	return w.send(context.Background(), bridge.PathSettle(w.id, a.AssignmentID), s)
}

// serve runs a worker loop in the background until stop is called: it
// answers every sandbox assignment with fn's result.
func (w *testWorker) serve(fn func(a *bridge.Assignment) bridge.Settlement) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if r, _ := w.register(); r.status != 200 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			r, a := w.lease(ctx, 200)
			if r.status != 200 || a == nil {
				continue
			}
			if w.ack(a).status != 200 {
				continue
			}
			w.settle(a, fn(a))
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// runnerReply answers a sandbox assignment like Piston's /execute.
func runnerReply(a *bridge.Assignment, inc string) bridge.Settlement {
	body, _ := a.Request.Object().Get("body")
	lang, _ := body.(*bridge.Object).Get("language")
	files, _ := body.(*bridge.Object).Get("files")
	code, _ := files.([]any)[0].(*bridge.Object).Get("content")
	out := &bridge.Object{}
	run := &bridge.Object{}
	run.Set("stdout", "ran:"+code.(string))
	run.Set("stderr", "")
	run.Set("code", 0.0)
	run.Set("signal", nil)
	run.Set("output", "ran:"+code.(string))
	out.Set("run", run)
	out.Set("language", lang)
	out.Set("version", "3.12.0")
	return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: inc, Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)}
}
