package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/boltstore"
)

// E23: a stateful assignment aborted after it reached the runner quarantines the session locally (no
// settlement; the worker serves on, issue 35 item 2); the hub keeps the session's fence, so the next
// dispatch is 409 session_quarantined; with the worker stopped, reset-workspace is WORKER_BUSY while the
// abandoned assignment's lock lives, then clears the fence, and the session can be dispatched again.
//
// The hub sends run_timeout below its deadline, so with codellm's runner a slow program ends in a timeout
// reply (TestStatefulTimeoutKeepsSession); the runner here ignores run_timeout, as a runner that does not
// implement it would, so that the deadline is reached mid-run.
func TestStatefulQuarantineAndReset(t *testing.T) {
	h := newTestHub(t, nil, boltstore.WithGrace(2*time.Second))
	id, path := h.pair(t, "st")
	sup := newEmbedded(t, true)
	r1 := start(t, baseConfig(h, id, path, ignoreRunTimeout{sup}))
	h.waitReady(t, "st")
	rep := h.exec(t, "py", "open('state.txt','w').write('kept'); print('wrote')", nil)
	m := decodeExec(t, rep)
	sid, _ := m["session_id"].(string)
	if rep.status != 200 || sid == "" {
		t.Fatalf("first exec: %d %s", rep.status, rep.body)
	}
	execIn := func(code string, hdr map[string]string) reply {
		b, _ := json.Marshal(map[string]string{"lang": "py", "code": code, "session_id": sid})
		return h.client(t, context.Background(), "/v1/exec", string(b), hdr)
	}
	rep = execIn("print(open('state.txt').read())", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "kept\n" {
		t.Fatalf("stateful read: %d %s", rep.status, rep.body)
	}
	rep = execIn("import time; time.sleep(30)", map[string]string{"X-Codellm-Timeout-Ms": "1500"})
	if rep.status != 504 {
		t.Fatalf("expiring stateful exec: %d %s", rep.status, rep.body)
	}
	r1.waitLog(t, "quarantined locally")
	r1.serving(t)
	rep = execIn("print(1)", nil)
	if rep.status != 409 || !strings.Contains(string(rep.body), "session_quarantined") {
		t.Fatalf("dispatch to a fenced session: %d %s", rep.status, rep.body)
	}
	if err := r1.stop(t); err != nil { // reset-workspace runs with the worker stopped (§10.4)
		t.Fatalf("worker stop: %v", err)
	}

	resetter, err := New(Config{BaseURL: h.base, WorkerID: "st", Identity: id, IdentityPath: path, Supervisor: sup, Timing: fastTiming})
	if err != nil {
		t.Fatal(err)
	}
	err = resetter.ResetWorkspace(t.Context(), sid)
	var be *bridge.Error
	if !errors.As(err, &be) || be.Code != bridge.CodeWorkerBusy {
		t.Fatalf("reset while the lock lives: %v", err)
	}
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if err = resetter.ResetWorkspace(t.Context(), sid); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Fatalf("reset: %v", err)
	}
	r2 := start(t, baseConfig(h, id, path, sup))
	r2.waitRegistered(t)
	rep = execIn("import os; print(os.path.exists('state.txt'))", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "False\n" {
		t.Fatalf("after reset: %d %s", rep.status, rep.body)
	}
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}
}

// ignoreRunTimeout drops run_timeout from runner calls.
type ignoreRunTimeout struct{ Supervisor }

func (s ignoreRunTimeout) Execute(ctx context.Context, call RunnerCall) (*bridge.Object, error) {
	if o, err := bridge.ParseObject(call.Body); err == nil {
		o.Delete("run_timeout")
		call.Body, _ = bridge.Canonical(o)
	}
	return s.Supervisor.Execute(ctx, call)
}

// The endpoint supervisor calls a loopback runner URL with the {runtimeSessionId} placeholder replaced
// (encodeURIComponent) and X-Runtime-Session-Id set; sessions keep their files there.
func TestEndpointSupervisor(t *testing.T) {
	emb := newEmbedded(t, true)
	var mu sync.Mutex
	var seen []string
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.EscapedPath()+" "+r.Header.Get("X-Runtime-Session-Id"))
		mu.Unlock()
		_, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/s/"), "/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		r.URL.Path, r.URL.RawPath = "/"+rest, ""
		emb.runnerH.ServeHTTP(w, r)
	}))
	defer rs.Close()
	if _, err := NewEndpoint("http://192.0.2.1:2000/api/v2", false, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("remote endpoint accepted: %v", err)
	}
	ep, err := NewEndpoint(rs.URL+"/s/{runtimeSessionId}/api/v2/", false, nil)
	if err != nil || !ep.Stateful() {
		t.Fatalf("endpoint: %v", err)
	}
	h := newTestHub(t, nil)
	id, path := h.pair(t, "ep")
	r := start(t, baseConfig(h, id, path, ep))
	h.waitReady(t, "ep")
	rep := h.exec(t, "py", "open('f','w').write('x'); print('ok')", nil)
	m := decodeExec(t, rep)
	sid, _ := m["session_id"].(string)
	if rep.status != 200 || m["stdout"] != "ok\n" {
		t.Fatalf("exec: %d %s", rep.status, rep.body)
	}
	b, _ := json.Marshal(map[string]string{"lang": "py", "code": "print(open('f').read())", "session_id": sid})
	rep = h.client(t, context.Background(), "/v1/exec", string(b), nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "x\n" {
		t.Fatalf("same session: %d %s", rep.status, rep.body)
	}
	mu.Lock()
	want := "/s/" + bridge.EscapeWorkerID(sid) + "/api/v2/execute " + sid
	if len(seen) != 2 || seen[0] != want || seen[1] != want {
		t.Fatalf("runner saw %q, want %q twice", seen, want)
	}
	mu.Unlock()

	// E30: the runner's session becomes dirty behind the worker's back (a run killed because its
	// caller went away, so nobody got its reply); the next assignment for it gets 409
	// session_workspace_dirty, which is not known-clean: the worker quarantines the session and sends no
	// settlement; the session stays fenced, and the worker serves on (issue 35 item 2).
	dctx, dcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	dirty, _ := http.NewRequestWithContext(dctx, http.MethodPost, rs.URL+"/s/"+bridge.EscapeWorkerID(sid)+"/api/v2/execute",
		strings.NewReader(`{"language":"bash","version":"*","files":[{"content":"sleep 5"}]}`))
	dirty.Header.Set("Content-Type", "application/json")
	dirty.Header.Set("X-Runtime-Session-Id", sid)
	if _, err := http.DefaultClient.Do(dirty); err == nil {
		t.Fatal("the dirtying run answered before its caller gave up")
	}
	dcancel()
	b, _ = json.Marshal(map[string]string{"lang": "py", "code": "print(2)", "session_id": sid})
	rep = h.client(t, context.Background(), "/v1/exec", string(b), map[string]string{"X-Codellm-Timeout-Ms": "2000"})
	if rep.status != 504 {
		t.Fatalf("exec in a dirty session: %d %s", rep.status, rep.body)
	}
	r.waitLog(t, "session_workspace_dirty")
	r.serving(t)
	if n := strings.Count(r.logs.String(), "quarantined locally"); n != 1 {
		t.Errorf("the dirty session's assignment ran %d times, want once", n)
	}
	rep = h.client(t, context.Background(), "/v1/exec", string(b), nil)
	if rep.status != 409 || !strings.Contains(string(rep.body), "session_quarantined") {
		t.Fatalf("the dirty session after its quarantine: %d %s, want 409 session_quarantined", rep.status, rep.body)
	}
}

// E18: the ack reaches the hub but its reply is lost: the worker settles a rejection saying so, and the
// client gets 502.
func TestAmbiguousAck(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "amb")
	r := start(t, baseConfig(h, id, path, newEmbedded(t, false)))
	h.waitReady(t, "amb")
	h.setFault(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.HasSuffix(req.URL.Path, "/ack") {
			return false
		}
		h.Hub.ServeHTTP(httptest.NewRecorder(), req) // processed by the hub …
		http.Error(w, "bad gateway", http.StatusBadGateway)
		return true // … but the worker sees a 502
	})
	rep := h.exec(t, "bash", "echo ran", nil)
	if rep.status != 502 || !strings.Contains(string(rep.body), "ambiguous") {
		t.Fatalf("ambiguous ack: %d %s", rep.status, rep.body)
	}
	h.setFault(nil)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Static-token mode (development): the worker authenticates with the shared bearer token; a wrong token is
// refused and the worker exits 3.
func TestStaticMode(t *testing.T) {
	h := newTestHub(t, func(c *hub.Config) {
		c.AuthMode = hub.AuthStatic
		c.WorkerToken = "static-worker-token-0123456789abcdef"
	})
	cfg := Config{BaseURL: h.base, WorkerID: "dev", StaticToken: "static-worker-token-0123456789abcdef",
		Supervisor: newEmbedded(t, false), Runtimes: []string{"python"}, Timing: fastTiming}
	r := start(t, cfg)
	h.waitReady(t, "dev")
	rep := h.exec(t, "py", "print('static')", nil)
	if m := decodeExec(t, rep); rep.status != 200 || m["stdout"] != "static\n" {
		t.Fatalf("exec: %d %s", rep.status, rep.body)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	cfg.WorkerID, cfg.StaticToken = "dev2", "wrong-token-0123456789abcdef0123456789"
	bad := start(t, cfg)
	if err := bad.wait(t, 10*time.Second); ExitCode(err) != ExitAuth {
		t.Fatalf("wrong token: exit %d (%v)", ExitCode(err), err)
	}
}

// Identity files: written 0600 atomically and reloaded; a group-readable file is refused; a mismatched
// worker ID is refused; no temporary file is left behind.
func TestIdentityFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, IdentityFileName("my:vm"))
	pub, priv, _ := bridge.GenerateKey()
	id := &Identity{ProtocolVersion: 1, WorkerID: "my:vm", Credential: bridge.NewSecret(), ExpiresAt: bridge.FormatTime(time.Now()),
		CodeAPIURL: "https://hub.example.com/v1"}
	id.PublicKey, _ = bridge.MarshalPublicKeyPEM(pub)
	id.PrivateKey, _ = bridge.MarshalPrivateKeyPEM(priv)
	if err := SaveIdentity(path, id); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "{\n  \"protocolVersion\": 1,\n  \"workerId\": \"my:vm\",\n  \"credential\"") || !strings.HasSuffix(string(b), "}\n") {
		t.Fatalf("layout:\n%s", b)
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s mode %v", d, fi.Mode())
		}
	}
	got, err := LoadIdentity(path, "my:vm")
	if err != nil || got.Credential != id.Credential || !got.PrivateKeyValue().Equal(priv) {
		t.Fatalf("load: %v", err)
	}
	if _, err := LoadIdentity(path, "other"); !errors.Is(err, ErrIdentity) {
		t.Fatalf("wrong worker: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(path, "my:vm"); !errors.Is(err, ErrIdentity) || !strings.Contains(err.Error(), "compromised") {
		t.Fatalf("0640 identity: %v", err)
	}
	// A rewrite restores 0600.
	if err := SaveIdentity(path, id); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(path, "my:vm"); err != nil {
		t.Fatal(err)
	}
}

// canonURL and the marker's malformed states (§5, §10.1).
func TestCanonicalURLAndMarkerChecks(t *testing.T) {
	for in, want := range map[string]string{
		"HTTPS://Hub.Example.com:443/v1/": "https://hub.example.com/v1",
		"http://127.0.0.1:80":             "http://127.0.0.1/",
		"http://localhost:8090/v1#frag":   "http://localhost:8090/v1",
	} {
		if got, err := CanonicalURL(in); err != nil || got != want {
			t.Errorf("%s: %q %v", in, got, err)
		}
	}
	if err := checkHubURL("http://hub.example.com/v1"); !errors.Is(err, ErrConfig) {
		t.Errorf("plain http to a remote hub accepted: %v", err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "m.json")
	if err := CheckMarker(p); err != nil {
		t.Fatalf("absent marker: %v", err)
	}
	for name, content := range map[string]string{
		"not json":  "nope",
		"version":   `{"version":2,"reason":"x","quarantinedAt":"2025-06-01T12:00:02.500Z"}`,
		"no reason": `{"version":1,"reason":" ","quarantinedAt":"2025-06-01T12:00:02.500Z"}`,
		"bad date":  `{"version":1,"reason":"x","quarantinedAt":"yesterday"}`,
	} {
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := CheckMarker(p); !errors.Is(err, ErrQuarantined) {
			t.Errorf("%s: %v", name, err)
		}
	}
	_ = os.Remove(p)
	if err := ArmMarker(p, Marker{WorkerID: "w", WorkspaceID: "primary", OwnerID: "owner-aaaaaaaaaaaaaaaa", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	if err := ArmMarker(p, Marker{Reason: "again"}); !errors.Is(err, ErrMarkerExists) {
		t.Fatalf("second arm: %v", err)
	}
	if err := ClearOwnedMarker(p, "someone-else-aaaaaaaaa"); !errors.Is(err, ErrQuarantined) {
		t.Fatalf("foreign clear: %v", err)
	}
	if err := ClearOwnedMarker(p, "owner-aaaaaaaaaaaaaaaa"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("marker survived its owner's clear: %v", err)
	}
}

// A worker that loses the hub says so: Connected (and so the status listener's /readyz) turns false
// while every request fails, and true again once the hub answers, without a restart.
func TestConnectedFollowsTheHub(t *testing.T) {
	h := newTestHub(t, nil)
	id, path := h.pair(t, "conn")
	r := start(t, baseConfig(h, id, path, newEmbedded(t, false)))
	h.waitReady(t, "conn")
	waitFor := func(what string, want bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); r.w.Connected() != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("Connected() still %v, want %v, %s", !want, want, what)
			}
		}
	}
	waitFor("after registering", true)
	h.setFault(func(w http.ResponseWriter, req *http.Request) bool {
		http.Error(w, "hub down", http.StatusServiceUnavailable)
		return true
	})
	waitFor("with every request failing", false)
	if !r.w.Registered() {
		t.Fatal("Registered() went false: it says the hub accepted this incarnation once")
	}
	h.setFault(nil)
	waitFor("once the hub answers again", true)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
