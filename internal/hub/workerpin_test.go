package hub

import (
	"bytes"
	"crypto"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// pinCall is one request of the pinning golden file and the hub's answer.
type pinCall struct {
	Name    string            `json:"name"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Status  int               `json:"status"`
	Body    string            `json:"body"`
}

// whoReply answers a sandbox assignment with the worker's own ID as stdout, so a reply shows where it ran.
func whoReply(w *testWorker) func(a *bridge.Assignment) bridge.Settlement {
	return func(a *bridge.Assignment) bridge.Settlement {
		out, run := &bridge.Object{}, &bridge.Object{}
		run.Set("stdout", "on "+w.id+"\n")
		run.Set("stderr", "")
		run.Set("code", 0.0)
		run.Set("signal", nil)
		run.Set("output", "on "+w.id+"\n")
		out.Set("run", run)
		out.Set("language", "python")
		out.Set("version", "3.12.0")
		return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: w.incarnation,
			Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)}
	}
}

// pinHub is a hub with a static key and signed tokens and two serving workers, vm-a and vm-b; its
// allow-list has them and ghost-vm, which never connects.
func pinHub(t *testing.T) *testHub {
	h := newTestHub(t, func(c *Config) {
		c.ClientJWT = &ClientJWT{Keys: map[string]crypto.PublicKey{DefaultClientJWTKID: testEdKey.Public()}}
		c.WorkerIDs = []string{"vm-a", "vm-b", "ghost-vm"} // ghost-vm never connects
	})
	for _, id := range []string{"vm-a", "vm-b"} {
		w := newWorker(t, h, id)
		w.pair(h)
		w.mustRegister()
		t.Cleanup(w.serve(whoReply(w)))
	}
	return h
}

// TestWorkerPinGolden pins how the hub answers LibreChat's worker selection (issue 40 item 3): the
// X-LibreChat-Code-Worker-ID header, the signed token's code_worker_id claim, and their disagreements,
// in the Code API's statuses (service/src/bridge/selection.ts: 400 malformed, 403 unauthenticated or
// mismatched selection, 503 no worker). Before this change the header was ignored: a pin to a worker
// that does not exist ran elsewhere with 200 ("unknown worker" below). Regenerate with -update.
func TestWorkerPinGolden(t *testing.T) {
	h := pinHub(t)
	now := time.Now()
	tok := func(worker string) string { return "Bearer " + mintLC(t, lcClaims(now, "u1", "acme", worker)) }
	staticKey := map[string]string{"X-API-Key": apiKey}
	signed := func(worker string, hdr ...string) map[string]string {
		m := map[string]string{"X-API-Key": "", "Authorization": tok(worker)}
		for i := 0; i+1 < len(hdr); i += 2 {
			m[hdr[i]] = hdr[i+1]
		}
		return m
	}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	expired := lcClaims(now.Add(-10*time.Minute), "u1", "acme", "vm-a")
	const exec, code = "/v1/exec", `{"lang":"py","code":"print(1)"}`
	calls := []struct {
		name, path, body string
		hdr              map[string]string
		ranOn            string // the worker whose stdout the 200 shows
	}{
		{"static key pins vm-b by the LibreChat header", exec, code, with(staticKey, HeaderLibreChatWorker, "vm-b"), "vm-b"},
		{"static key pins vm-a by codellm's header", exec, code, with(staticKey, HeaderCodellmWorker, "vm-a"), "vm-a"},
		{"both headers agree", exec, code, with(staticKey, HeaderLibreChatWorker, "vm-a", HeaderCodellmWorker, "vm-a"), "vm-a"},
		{"unknown worker", exec, code, with(staticKey, HeaderLibreChatWorker, "ghost-vm"), ""},
		{"malformed worker ID", exec, code, with(staticKey, HeaderLibreChatWorker, "../vm"), ""},
		{"headers name different workers", exec, code, with(staticKey, HeaderLibreChatWorker, "vm-a", HeaderCodellmWorker, "vm-b"), ""},
		{"token's code_worker_id pins vm-b", exec, code, signed("vm-b"), "vm-b"},
		{"token's claim and the header agree", exec, code, signed("vm-a", HeaderLibreChatWorker, "vm-a"), "vm-a"},
		{"header names another worker than the claim", exec, code, signed("vm-a", HeaderLibreChatWorker, "vm-b"), ""},
		{"codellm's header names another worker than the claim", exec, code, signed("vm-a", HeaderCodellmWorker, "vm-b"), ""},
		{"header without a code_worker_id claim", exec, code, signed("", HeaderLibreChatWorker, "vm-a"), ""},
		{"claim outside the worker allow-list", exec, code, signed("vm-c"), ""},
		{"expired token", exec, code, map[string]string{"X-API-Key": "", "Authorization": "Bearer " + mintLC(t, expired)}, ""},
		{"token of an unknown kid", exec, code, map[string]string{"X-API-Key": "", "Authorization": "Bearer " +
			signJWT(t, testEdKey, `{"alg":"EdDSA","typ":"JWT","kid":"lc-codeapi-2099-01"}`, `{}`)}, ""},
		{"chat: header names another worker than the claim", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			signed("vm-a", HeaderLibreChatWorker, "vm-b"), ""},
		{"workspace tools: workerId other than the claim", "/v1/workspace-tools",
			`{"workerId":"vm-b","request":{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"README.md"}}`, signed("vm-a"), ""},
	}
	sid := regexp.MustCompile(`"session_id":"[A-Za-z0-9_-]{21}"`)
	var got []pinCall
	for _, c := range calls {
		r := h.client(t, c.path, c.body, c.hdr)
		if c.ranOn != "" {
			var out struct{ Stdout string }
			if r.status != 200 || json.Unmarshal(r.body, &out) != nil || out.Stdout != "on "+c.ranOn+"\n" {
				t.Errorf("%s: %d %s, want a run on %s", c.name, r.status, r.body, c.ranOn)
			}
		}
		shown := map[string]string{}
		for k, v := range c.hdr {
			switch {
			case k == "X-API-Key" && v == "":
			case k == "X-API-Key":
				shown[k] = "<static key>"
			case k == "Authorization":
				shown[k] = "Bearer <signed token>"
			default:
				shown[k] = v
			}
		}
		got = append(got, pinCall{Name: c.name, Path: c.path, Headers: shown, Status: r.status, Body: sid.ReplaceAllString(string(r.body), `"session_id":"<id>"`)})
	}
	compareGolden(t, "testdata/pin_golden.json", got)
	// Without a pin a signed token or a static key runs on either worker.
	for name, hdr := range map[string]map[string]string{"static": staticKey, "signed": signed("")} {
		if r := h.client(t, exec, code, hdr); r.status != 200 {
			t.Errorf("%s, no pin: %d %s", name, r.status, r.body)
		}
	}
}

// TestSignedTokenIdentity shows a signed token's identity at work beyond pinning: its tenant owns what it
// uploads (a static key of another tenant does not see it), a hub without signed tokens says so, and
// idempotent replays are per user, across tokens that differ only in jti and times.
func TestSignedTokenIdentity(t *testing.T) {
	h := pinHub(t)
	now := time.Now()
	bearer := func(sub string, at time.Time) map[string]string {
		c := lcClaims(at, sub, "acme", "")
		c["jti"] = at.String()
		return map[string]string{"X-API-Key": "", "Authorization": "Bearer " + mintLC(t, c)}
	}
	req, _ := http.NewRequest(http.MethodGet, h.base+"/files/"+newSessionID(), nil)
	req.Header.Set("Authorization", bearer("u1", now)["Authorization"])
	if r := doHTTP(t, req); r.status != 200 { // an unknown session lists empty, as upstream
		t.Fatalf("signed token on a file route: %d %s", r.status, r.body)
	}
	// Uploaded with a token (tenant acme), listed with it; the static key (tenant default) gets 404.
	ur := h.upload(t, bearer("u1", now)["Authorization"], false, uploadPart{"file", "a.txt", "x"})
	var u struct {
		Session string `json:"storage_session_id"`
	}
	if ur.status != 200 || json.Unmarshal(ur.body, &u) != nil {
		t.Fatalf("upload with a signed token: %d %s", ur.status, ur.body)
	}
	up := u.Session
	list := func(auth map[string]string) string {
		req, _ := http.NewRequest(http.MethodGet, h.base+"/files/"+up, nil)
		for k, v := range auth {
			req.Header.Set(k, v)
		}
		r := doHTTP(t, req)
		if r.status != 200 {
			t.Fatalf("list: %d %s", r.status, r.body)
		}
		return string(r.body)
	}
	if s := list(bearer("u2", now)); !strings.Contains(s, "a.txt") {
		t.Errorf("same tenant, signed: %s", s)
	}
	if s := list(map[string]string{"X-API-Key": apiKey}); s != "[]" {
		t.Errorf("other tenant, static key: %s", s)
	}
	// Idempotency-Key: a retry with a fresh token of the same user replays; another user's runs anew.
	idem := func(sub string, at time.Time) reply {
		return h.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, with2(bearer(sub, at), "Idempotency-Key", "retry-1"))
	}
	first, again, other := idem("u1", now), idem("u1", now.Add(time.Second)), idem("u2", now)
	if first.status != 200 || !bytes.Equal(first.body, again.body) || bytes.Equal(first.body, other.body) {
		t.Errorf("idempotent replay per user: %s / %s / %s", first.body, again.body, other.body)
	}
	plain := newTestHub(t, nil)
	r := plain.client(t, "/v1/exec", `{"lang":"py","code":"x"}`, bearer("u1", now))
	if r.status != 401 || !strings.Contains(string(r.body), "Signed bearer tokens are not enabled") {
		t.Errorf("hub without signed tokens: %d %s", r.status, r.body)
	}
}

func with2(m map[string]string, k, v string) map[string]string {
	m[k] = v
	return m
}
