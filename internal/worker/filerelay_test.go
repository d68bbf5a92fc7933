package worker

// The file relay with signed execution manifests end to end (issue 40 item 10): an assignment as a
// LibreChat Code API sends it — by-reference inputs, an Ed25519 execution manifest and an egress grant —
// runs on the embedded supervisor wrapped by WithFileEgress, which reads the inputs and stores the
// generated file through the worker's file relay, which talks to a stand-in for the Code API's egress gateway (upstream's service
// cannot run here, so an httptest server plays its object routes).

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/execmanifest"
	"github.com/codellm/codellm/internal/filerelay"
)

// gateway is the egress gateway stand-in: one stored input, uploads kept by object path, every request
// recorded with its grant and any relay token that (wrongly) reached it.
type gateway struct {
	mu       sync.Mutex
	objects  map[string][]byte // "/sessions/<sid>/objects/<id>" → bytes
	names    map[string]string // same key → X-Original-Filename
	requests []string          // "METHOD path grant=… token=…"
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	g.mu.Lock()
	defer g.mu.Unlock()
	key := strings.TrimPrefix(r.URL.EscapedPath(), "/egress")
	g.requests = append(g.requests, r.Method+" "+key+" grant="+r.Header.Get(filerelay.GrantHeader)+" token="+r.Header.Get(filerelay.TokenHeader))
	if r.Header.Get(filerelay.GrantHeader) != "grant-1" {
		w.Header().Set("X-CodeAPI-Error-Code", "scope_mismatch")
		w.WriteHeader(http.StatusForbidden)
		return
	}
	switch r.Method {
	case http.MethodGet:
		data, ok := g.objects[key]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Write(data)
	case http.MethodPut:
		if r.Header.Get("X-Original-Filename") == "refused.txt" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		g.objects[key], g.names[key] = b, r.Header.Get("X-Original-Filename")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"stored":true}`)
	}
}

func (g *gateway) seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.requests...)
}

type relayRig struct {
	sup  Supervisor
	gw   *gateway
	priv ed25519.PrivateKey
}

func newRelayRig(t *testing.T) *relayRig {
	t.Helper()
	return newRelayRigOn(t, newEmbedded(t, false))
}

// newRelayRigOn wraps inner with the file egress of a relay in front of a fresh gateway stand-in.
func newRelayRigOn(t *testing.T, inner Supervisor) *relayRig {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	gw := &gateway{objects: map[string][]byte{"/sessions/sess-in/objects/obj-data": []byte("a,b\n1,2\n")}, names: map[string]string{}}
	gs := httptest.NewServer(gw)
	t.Cleanup(gs.Close)
	upClient := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(upClient.CloseIdleConnections)
	rl, err := filerelay.New(filerelay.Config{Upstream: gs.URL + "/egress", Token: "relay-token", MaxBytes: 1 << 20,
		Timeout: 10 * time.Second, MaxConcurrent: 4, Client: upClient})
	if err != nil {
		t.Fatal(err)
	}
	rs := httptest.NewServer(rl)
	t.Cleanup(rs.Close)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	sup := WithFileEgress(inner, &FileEgress{RelayURL: rs.URL, Token: "relay-token", Key: pub, Client: client})
	return &relayRig{sup: sup, gw: gw, priv: priv}
}

const relayCode = `print(open("data.csv").read().strip())
open("out.txt", "w").write("rows=2")
`

// relayBody is the execute body the Code API's service worker sends for relayCode, without its manifest.
func relayBody(t *testing.T) *bridge.Object {
	return relayBodyIn(t, "python", "main.py", relayCode)
}

func relayBodyIn(t *testing.T, lang, entry, code string) *bridge.Object {
	o, err := bridge.ParseObject([]byte(`{"language":"` + lang + `","version":"*","files":[
		{"name":"` + entry + `","content":` + jsonString(code) + `},
		{"id":"obj-data","storage_session_id":"sess-in","name":"data.csv"}],
		"session_id":"exec-1","output_session_id":"sess-out","egress_grant":"grant-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func canonicalOf(v any) string {
	b, _ := bridge.Canonical(v)
	return string(b)
}

func jsonString(s string) string {
	b, _ := bridge.Marshal(s)
	return string(b)
}

// manifest signs the claims the Code API would for body, changed by mod.
func (rg *relayRig) manifest(t *testing.T, body *bridge.Object, mod func(*bridge.Object)) string {
	t.Helper()
	sum, err := execmanifest.BodySHA256(body)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	c, err := bridge.ParseObject([]byte(`{"v":1,"exec_id":"exec-1","tenant_id":"t","user_id":"u","session_key":"k",
		"input_files":[{"id":"obj-data","session_id":"sess-in","name":"data.csv"}],"read_sessions":["sess-in"],
		"output_session_id":"sess-out","max_upload_bytes":1048576,"max_output_files":4,"max_requests":8}`))
	if err != nil {
		t.Fatal(err)
	}
	c.Set("iat", float64(now))
	c.Set("exp", float64(now+300))
	c.Set("execute_body_sha256", sum)
	if mod != nil {
		mod(c)
	}
	tok, err := execmanifest.Sign(c, rg.priv)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (rg *relayRig) run(t *testing.T, body *bridge.Object, headers [][2]string) (*bridge.Object, error) {
	t.Helper()
	b, err := bridge.Canonical(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return rg.sup.Execute(ctx, RunnerCall{AssignmentID: "a-1", Body: b, Headers: headers})
}

// TestFileRelayDockerSupervisor: the same exchange with the runner in a runtime container, which keeps
// --network none: the worker, not the container, reads and stores the files.
func TestFileRelayDockerSupervisor(t *testing.T) {
	rg := newRelayRigOn(t, newTestDocker(t))
	body := relayBodyIn(t, "bash", "main.sh", "cat data.csv\nprintf rows=2 > out.txt\n")
	body.Set(execmanifest.BodyMember, rg.manifest(t, body, nil))
	res, err := rg.run(t, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	run, _ := res.Get("run")
	stdout, _ := run.(*bridge.Object).Get("stdout")
	files, _ := res.Get("files")
	fl, _ := files.([]any)
	if stdout != "a,b\n1,2\n" || len(fl) != 1 {
		t.Fatalf("stdout %q files %s", stdout, canonicalOf(files))
	}
	id, _ := fl[0].(*bridge.Object).Get("id")
	if got := string(rg.gw.objects["/sessions/sess-out/objects/"+id.(string)]); got != "rows=2" {
		t.Fatalf("gateway stored %q", got)
	}
}

// TestFileRelayInputsAndOutputs: the manifest in the body (and, separately, in the header) authorises
// the run; the input arrives through the relay, the generated file leaves through it and comes back as
// a reference, and the relay token never reaches the gateway.
func TestFileRelayInputsAndOutputs(t *testing.T) {
	for _, inHeader := range []bool{false, true} {
		rg := newRelayRig(t)
		body := relayBody(t)
		tok := rg.manifest(t, body, nil)
		var hdr [][2]string
		if inHeader {
			hdr = [][2]string{{execmanifest.Header, tok}}
		} else {
			body.Set(execmanifest.BodyMember, tok)
		}
		res, err := rg.run(t, body, hdr)
		if err != nil {
			t.Fatalf("inHeader=%v: %v", inHeader, err)
		}
		run, _ := res.Get("run")
		stdout, _ := run.(*bridge.Object).Get("stdout")
		if stdout != "a,b\n1,2\n" {
			t.Fatalf("stdout = %q, want the input read through the relay", stdout)
		}
		files, _ := res.Get("files")
		fl, _ := files.([]any)
		if len(fl) != 1 {
			t.Fatalf("files = %v", files)
		}
		f := fl[0].(*bridge.Object)
		id, _ := f.Get("id")
		name, _ := f.Get("name")
		_, hasContent := f.Get("content")
		if name != "out.txt" || hasContent || len(id.(string)) != 21 {
			t.Fatalf("generated file entry = %s", canonicalOf(f))
		}
		key := "/sessions/sess-out/objects/" + id.(string)
		if got := string(rg.gw.objects[key]); got != "rows=2" || rg.gw.names[key] != "out.txt" {
			t.Fatalf("gateway stored %q as %q", got, rg.gw.names[key])
		}
		want := []string{"GET /sessions/sess-in/objects/obj-data grant=grant-1 token=", "PUT " + key + " grant=grant-1 token="}
		if got := rg.gw.seen(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("gateway saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// TestFileRelayRefusesBadManifests: every refusal happens before the relay is used — the gateway sees
// nothing — and answers the Code API sandbox's status and sentence, as a known-clean rejection.
func TestFileRelayRefusesBadManifests(t *testing.T) {
	rg := newRelayRig(t)
	cases := []struct {
		name   string
		build  func(t *testing.T) *bridge.Object
		status int
		msg    string
	}{
		{"no manifest", func(t *testing.T) *bridge.Object { return relayBody(t) }, 401, "X-CodeAPI-Execution-Manifest is required"},
		{"forged claims", func(t *testing.T) *bridge.Object {
			b := relayBody(t)
			tok := rg.manifest(t, b, nil)
			forged := rg.manifest(t, b, func(c *bridge.Object) { c.Set("max_upload_bytes", float64(1<<40)) })
			b.Set(execmanifest.BodyMember, strings.Split(forged, ".")[0]+"."+strings.Split(tok, ".")[1])
			return b
		}, 403, "Execution manifest signature is invalid"},
		{"another signer", func(t *testing.T) *bridge.Object {
			b := relayBody(t)
			other := &relayRig{}
			_, other.priv, _ = ed25519.GenerateKey(rand.Reader)
			b.Set(execmanifest.BodyMember, other.manifest(t, b, nil))
			return b
		}, 403, "Execution manifest signature is invalid"},
		{"expired", func(t *testing.T) *bridge.Object {
			b := relayBody(t)
			b.Set(execmanifest.BodyMember, rg.manifest(t, b, func(c *bridge.Object) {
				c.Set("exp", float64(time.Now().Add(-time.Minute).Unix()))
			}))
			return b
		}, 403, "Execution manifest is expired"},
		{"input the manifest does not grant", func(t *testing.T) *bridge.Object {
			b := relayBody(t)
			tok := rg.manifest(t, b, nil)
			v, _ := b.Get("files")
			fo := v.([]any)[1].(*bridge.Object)
			fo.Set("storage_session_id", "someone-elses-session")
			b.Set(execmanifest.BodyMember, tok)
			return b
		}, 403, "Execution manifest input file scope does not match request"},
		{"code changed after signing", func(t *testing.T) *bridge.Object {
			b := relayBody(t)
			tok := rg.manifest(t, b, nil)
			b.Set("stdin", "extra")
			b.Set(execmanifest.BodyMember, tok)
			return b
		}, 403, "Execution manifest body hash does not match request"},
		{"undecodable", func(t *testing.T) *bridge.Object {
			b := relayBody(t)
			b.Set(execmanifest.BodyMember, "not.a.manifest")
			return b
		}, 400, "Execution manifest token is malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rg.run(t, tc.build(t), nil)
			var re *RunError
			if !errors.As(err, &re) || re.Status != tc.status || re.Message != tc.msg {
				t.Fatalf("err = %#v, want %d %q", err, tc.status, tc.msg)
			}
			if !re.KnownClean && tc.status < 500 {
				t.Fatalf("a refusal before the run is not known-clean: %+v", re)
			}
			if s := rg.gw.seen(); len(s) != 0 {
				t.Fatalf("the gateway was reached: %v", s)
			}
		})
	}
}

// TestFileRelayWithoutGrant: a verified manifest without an egress grant never reaches the relay.
func TestFileRelayWithoutGrant(t *testing.T) {
	rg := newRelayRig(t)
	b := relayBody(t)
	b.Delete("egress_grant")
	b.Set(execmanifest.BodyMember, rg.manifest(t, b, nil))
	_, err := rg.run(t, b, nil)
	var re *RunError
	if !errors.As(err, &re) || re.Status != 403 || !strings.Contains(re.Message, "egress grant") {
		t.Fatalf("err = %v", err)
	}
	if s := rg.gw.seen(); len(s) != 0 {
		t.Fatalf("the gateway was reached: %v", s)
	}
}

// TestFileRelayOutputBounds: generated files beyond the manifest's max_output_files or max_upload_bytes,
// or refused by the gateway, are left out with files_truncated — never answered as references that do not
// resolve — and every answered reference is stored.
func TestFileRelayOutputBounds(t *testing.T) {
	rg := newRelayRig(t)
	code := `open("a.txt", "w").write("a")
open("big.txt", "w").write("x" * 2048)
open("refused.txt", "w").write("r")
open("z1.txt", "w").write("1")
open("z2.txt", "w").write("2")
`
	b, err := bridge.ParseObject([]byte(`{"language":"python","version":"*","files":[{"name":"main.py","content":` +
		jsonString(code) + `}],"session_id":"exec-2","output_session_id":"sess-out","egress_grant":"grant-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	b.Set(execmanifest.BodyMember, rg.manifest(t, b, func(c *bridge.Object) {
		c.Set("input_files", []any{})
		c.Set("read_sessions", []any{})
		c.Set("max_output_files", float64(2))
		c.Set("max_upload_bytes", float64(1024))
	}))
	res, err := rg.run(t, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := res.Get("files")
	var names []string
	for _, f := range files.([]any) {
		fo := f.(*bridge.Object)
		name, _ := fo.Get("name")
		id, _ := fo.Get("id")
		names = append(names, name.(string))
		if _, ok := rg.gw.objects["/sessions/sess-out/objects/"+id.(string)]; !ok {
			t.Fatalf("%v answered as %v but not stored", name, id)
		}
	}
	trunc, _ := res.Get("files_truncated")
	// big.txt is over max_upload_bytes, refused.txt refused by the gateway, and after a.txt and z1.txt the
	// manifest's two output files are used up: z2.txt is left out.
	if strings.Join(names, ",") != "a.txt,z1.txt" || trunc != true {
		t.Fatalf("files %v truncated %v", names, trunc)
	}
}

// TestFileRelayMissingInput: an input the gateway does not have is a known-clean 400 naming it; the
// code never runs.
func TestFileRelayMissingInput(t *testing.T) {
	rg := newRelayRig(t)
	delete(rg.gw.objects, "/sessions/sess-in/objects/obj-data")
	b := relayBody(t)
	b.Set(execmanifest.BodyMember, rg.manifest(t, b, nil))
	_, err := rg.run(t, b, nil)
	var re *RunError
	if !errors.As(err, &re) || re.Status != 400 || !re.KnownClean ||
		!strings.Contains(re.Message, `object "obj-data" of session "sess-in": the file relay answered HTTP 404`) {
		t.Fatalf("err = %#v", err)
	}
	if s := rg.gw.seen(); len(s) != 1 {
		t.Fatalf("gateway saw %v, want only the failed read", s)
	}
}

// recordingSupervisor answers every call with a generated file and keeps what it was given.
type recordingSupervisor struct {
	Embedded
	calls []RunnerCall
}

func (r *recordingSupervisor) Execute(_ context.Context, call RunnerCall) (*bridge.Object, error) {
	r.calls = append(r.calls, call)
	return bridge.ParseObject([]byte(`{"run":{"stdout":""},"files":[{"name":"out.txt","size":2,"encoding":"base64","content":"b2s="}]}`))
}

// TestFileRelayRunnerHoldsNoCapability: what reaches the runner carries neither the manifest nor the
// grant, in the body or the headers — sandboxed code could otherwise replay them against the gateway —
// and the input arrives inline. The relay's request budget (max_requests) bounds the uploads: with one
// request left after the input, a second generated file is not stored.
func TestFileRelayRunnerHoldsNoCapability(t *testing.T) {
	inner := &recordingSupervisor{}
	rg := newRelayRigOn(t, inner)
	body := relayBody(t)
	tok := rg.manifest(t, body, func(c *bridge.Object) { c.Set("max_requests", float64(1)) })
	res, err := rg.run(t, body, [][2]string{{execmanifest.Header, tok}, {filerelay.GrantHeader, "grant-1"}, {"X-Other", "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	got := inner.calls[0]
	text := string(got.Body)
	if strings.Contains(text, "execution_manifest") || strings.Contains(text, "egress_grant") || strings.Contains(text, "grant-1") {
		t.Fatalf("runner body holds a capability: %s", text)
	}
	if len(got.Headers) != 1 || got.Headers[0][0] != "X-Other" {
		t.Fatalf("runner headers %v", got.Headers)
	}
	if !strings.Contains(text, `{"name":"data.csv","content":"YSxiCjEsMgo=","encoding":"base64"}`) {
		t.Fatalf("input not inline: %s", text)
	}
	if files, _ := res.Get("files"); len(files.([]any)) != 0 {
		t.Fatalf("stored past max_requests: %s", canonicalOf(files))
	}
	if s := rg.gw.seen(); len(s) != 1 {
		t.Fatalf("gateway saw %v, want the input read only", s)
	}
}
