package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/chat"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/slots"
)

func TestMain(m *testing.M) {
	sandbox.Main() // the sandbox helper hook must run first in a test binary that starts sandboxes
	// The sandbox keeps a pool of locked spawner threads for the life of the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"),
		goleak.Cleanup(func(code int) { closeTestSandbox(); removeBinDir(); os.Exit(code) })) // a Cleanup must exit itself
}

const (
	adminToken = "admin-token-for-worker-tests"
	apiKey     = "client-key-for-worker-tests"
)

// fastTiming keeps the protocol's shape with test-sized constants.
var fastTiming = Timing{LeaseWait: 300 * time.Millisecond, LeaseGrace: 2 * time.Second, RequestTimeout: 3 * time.Second,
	RetryStep: 50 * time.Millisecond, RejectionGrace: 3 * time.Second, ReconnectBase: 50 * time.Millisecond,
	ReconnectCap: 400 * time.Millisecond, CancelPoll: 100 * time.Millisecond, CancelTimeout: time.Second}

// testHub is a real hub on an httptest server. fault, when set, may answer a request instead of the hub
// (network fault injection: a proxy that drops or rewrites replies).
type testHub struct {
	*hub.Hub
	srv   *httptest.Server
	base  string
	store *boltstore.Store
	fault atomic.Pointer[func(w http.ResponseWriter, r *http.Request) bool]
}

func newTestHub(t testing.TB, mod func(*hub.Config), opts ...boltstore.Option) *testHub {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "bridge.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hub.Config{AdminToken: adminToken, ClientKeys: []hub.ClientKey{{Key: apiKey, TenantID: "default"}}, PollInterval: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	h, err := hub.New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	th := &testHub{Hub: h, store: st}
	th.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := th.fault.Load(); f != nil && (*f)(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	}))
	th.base = th.srv.URL + "/v1"
	t.Cleanup(func() {
		h.Close()
		th.srv.Close()
		_ = st.Close()
	})
	return th
}

func (h *testHub) setFault(f func(w http.ResponseWriter, r *http.Request) bool) {
	if f == nil {
		h.fault.Store(nil)
		return
	}
	h.fault.Store(&f)
}

type reply struct {
	status int
	body   []byte
	header http.Header
}

func doHTTP(t testing.TB, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{status: -1, body: []byte(err.Error())}
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

func (h *testHub) client(t testing.TB, ctx context.Context, path, body string, hdr map[string]string) reply {
	t.Helper()
	return h.clientAs(t, ctx, apiKey, path, body, hdr)
}

// clientAs is client with another client API key (another tenant's).
func (h *testHub) clientAs(t testing.TB, ctx context.Context, key, path, body string, hdr map[string]string) reply {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", key)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return doHTTP(t, req)
}

// exec runs code through /v1/exec and returns the reply.
func (h *testHub) exec(t testing.TB, lang, code string, hdr map[string]string) reply {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"lang": lang, "code": code})
	return h.client(t, context.Background(), "/v1/exec", string(b), hdr)
}

// pair creates a code and redeems it through Pair, returning the identity path.
func (h *testHub) pair(t testing.TB, workerID string) (*Identity, string) {
	t.Helper()
	r := h.admin(t, http.MethodPost, "/bridge/pairings", bridge.CreatePairingRequest{WorkerID: workerID})
	if r.status != 200 {
		t.Fatalf("create pairing: %d %s", r.status, r.body)
	}
	var pr bridge.CreatePairingResponse
	_ = json.Unmarshal(r.body, &pr)
	path := filepath.Join(t.TempDir(), "cfg", IdentityFileName(workerID))
	id, err := Pair(context.Background(), nil, h.base, pr.Code, workerID, path)
	if err != nil {
		t.Fatalf("pair: %v", err)
	}
	return id, path
}

// closeTestSandbox closes the shared test Sandbox when one was made: its pooled run cgroups would
// otherwise outlive the test binary.
func closeTestSandbox() {
	if sandboxMade.Load() {
		if sb, _ := testSandbox(); sb != nil {
			_ = sb.Close()
		}
	}
}

// sandboxMade records that testSandbox ran, so that closing it does not make one.
var sandboxMade atomic.Bool

// testSandbox is native when this host supports it, else off (as the runner's tests do).
var testSandbox = sync.OnceValues(func() (*sandbox.Sandbox, error) {
	sandboxMade.Store(true)
	mode := sandbox.ModeOff
	if rep := sandbox.Probe(sandbox.Config{Mode: sandbox.ModeNative}); rep.Ready {
		mode = sandbox.ModeNative
	}
	return sandbox.New(sandbox.Config{Mode: mode})
})

// newEmbedded builds codellm's runner and chat pipeline in-process, like `codellm worker run` does.
func newEmbedded(t testing.TB, stateful bool) *Embedded {
	t.Helper()
	return newEmbeddedWith(t, stateful, nil)
}

// newEmbeddedWith is newEmbedded with the runner's configuration changed by mod (its session limits).
func newEmbeddedWith(t testing.TB, stateful bool, mod func(*runner.Config)) *Embedded {
	t.Helper()
	sb, err := testSandbox()
	if err != nil {
		t.Fatal(err)
	}
	progs, err := interp.Enable(interp.Builtin(), []string{"python", "bash"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := slots.New(4, 5*time.Second)
	rcfg := runner.Config{Programs: progs, Sandbox: sb, Slots: pool, MaxRunTimeout: 60 * time.Second}
	if mod != nil {
		mod(&rcfg)
	}
	r, err := runner.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	ecfg := engine.Config{Programs: progs, Pipeline: pipeline.Config{Sandbox: sb, WorkRoot: t.TempDir(), MaxOutputBytes: 1 << 20, MaxStderrBytes: 64 << 10},
		Slots: pool, Timeout: 60 * time.Second, MaxBlocks: 16}
	eng := engine.New(ecfg, nil)
	if reason := eng.SelfCheck(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil))); reason != "" {
		t.Fatal(reason)
	}
	// As cmd/codellm's worker does: the chat core directly, no HTTP server in-process.
	return NewEmbedded(r, chat.New(chat.Config{Engine: eng}).Handler(), stateful)
}

// running is a worker loop in a goroutine.
type running struct {
	w      *Worker
	drain  context.CancelFunc
	hard   context.CancelFunc
	done   chan error
	logs   *syncBuffer
	result error
	once   sync.Once
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func baseConfig(h *testHub, id *Identity, path string, sup Supervisor) Config {
	return Config{BaseURL: h.base, WorkerID: id.WorkerID, Identity: id, IdentityPath: path, Supervisor: sup,
		Runtimes: []string{"python", "bash", "codellm.openai.chat.v1"}, Timing: fastTiming}
}

func start(t testing.TB, cfg Config) *running {
	t.Helper()
	logs := &syncBuffer{}
	cfg.Log = logs
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	drain, dc := context.WithCancel(context.Background())
	hard, hc := context.WithCancel(context.Background())
	r := &running{w: w, drain: dc, hard: hc, done: make(chan error, 1), logs: logs}
	go func() { r.done <- w.Run(drain, hard) }()
	key := cfg.BaseURL + "\x00" + cfg.WorkerID
	startedWorkers.Store(key, r)
	t.Cleanup(func() {
		startedWorkers.CompareAndDelete(key, r)
		r.stop(t)
		if t.Failed() {
			t.Logf("worker log:\n%s", logs.String())
		}
	})
	return r
}

// wait returns Run's result, failing the test if it does not end within d.
func (r *running) wait(t testing.TB, d time.Duration) error {
	t.Helper()
	r.once.Do(func() {
		select {
		case r.result = <-r.done:
		case <-time.After(d):
			r.hard()
			r.result = <-r.done
			t.Errorf("worker did not stop within %v", d)
		}
	})
	return r.result
}

func (r *running) stop(t testing.TB) error {
	r.drain()
	err := r.wait(t, 30*time.Second)
	r.hard()
	return err
}

// waitOnline waits until the hub reports the worker ready.
// startedWorkers are the workers start ran, by hub base URL and worker ID, so that waitReady can wait
// for the one it names to finish its registration.
var startedWorkers sync.Map

// waitReady waits until the hub reports workerID ready and, for a worker this test started, until the
// worker has finished §8.2's registration: it registers the compatible set first (the hub reports it
// ready then) and its negotiated set right after, so a request needing a negotiated capability (a
// workspace write, say) sent in between is answered WORKER_MISMATCH. CI hit that window.
func (h *testHub) waitReady(t testing.TB, workerID string) *bridge.StatusResponse {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if v, ok := startedWorkers.Load(h.base + "\x00" + workerID); ok && !v.(*running).w.Registered() {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		r := h.admin(t, http.MethodGet, bridge.PathStatus(workerID), nil)
		var st bridge.StatusResponse
		_ = json.Unmarshal(r.body, &st)
		if r.status == 200 && st.Ready {
			return &st
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("worker %s never became ready", workerID)
	return nil
}

func decodeExec(t testing.TB, r reply) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("exec reply %d %q: %v", r.status, r.body, err)
	}
	return m
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, err
}

// stripSupported makes the hub look like an older one: registration replies lose every supported* list.
func stripSupported(t testing.TB, h *testHub) func(w http.ResponseWriter, r *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/workers/register") {
			return false
		}
		rec := httptest.NewRecorder()
		h.Hub.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if rec.Code == 200 {
			o, err := bridge.ParseObject(body)
			if err != nil {
				t.Error(err)
				return false
			}
			for _, k := range []string{"supportedWorkspaceToolOperations", "supportedWorkspaceWriteFileModes", "supportedWorkspaceEditFileModes",
				"supportedWorkspaceEditFileFeatures", "supportedWorkspaceListFileFeatures"} {
				o.Delete(k)
			}
			body, _ = bridge.Canonical(o)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
		return true
	}
}

// waitRegistered waits until this incarnation's first registration was accepted.
func (r *running) waitRegistered(t testing.TB) {
	t.Helper()
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		r.w.mu.Lock()
		ok := r.w.negotiated
		r.w.mu.Unlock()
		if ok {
			return
		}
	}
	t.Fatal("worker never registered")
}
