package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/seal"
	"github.com/codellm/codellm/internal/testhelp"
)

// trip2gKey is a 40-character API key: trip2g refuses shorter ones.
const trip2gKey = "trip2g-e2e-key-0123456789abcdefghijklmno"

type served struct {
	base string
	logs *syncBuffer
}

// serveWith starts the real binary with exactly env (plus PATH, HOME and CODELLM_WORK_DIR, a fresh work dir
// removed at cleanup) and args (a serve command line), waits until it is ready on addr and stops it at
// cleanup.
func serveWith(t *testing.T, addr string, env []string, args ...string) *served {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "CODELLM_WORK_DIR=" + newWorkDir(t)}, env...)
	logs := newSyncBuffer()
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { testhelp.StopGracefully(cmd.Process, exited, stopGrace) })
	base := "http://" + addr
	waitReady(t, base, exited, logs)
	return &served{base: base, logs: logs}
}

// chat posts messages (and a fleet_input bag when bag != nil) and returns the status and the tool calls
// as "name arguments" lines, or the error code and message.
func (s *served) chat(t *testing.T, body string, bag any) (int, []string, string) {
	t.Helper()
	msgs := []map[string]any{{"role": "system", "content": "<wrapper>\n\nInstruction:\n" + body}}
	if bag != nil {
		raw, _ := json.Marshal(bag)
		msgs = append(msgs, map[string]any{"role": "system", "name": "fleet_input", "content": string(raw)})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "Begin."})
	raw, _ := json.Marshal(map[string]any{"model": "codellm", "messages": msgs})
	req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/chat/completions", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+trip2gKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out chatReply
	json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, out.Error.Code + ": " + out.Error.Message
	}
	return resp.StatusCode, out.calls(), ""
}

// trip2gEnv is how trip2g's deploy scripts start its codellm: only trip2g's variable names.
func trip2gEnv(t *testing.T, addr string) []string {
	registry := filepath.Join(t.TempDir(), "interpreters.json")
	os.WriteFile(registry, []byte(`{"env": [{"name": "SSL_CERT_FILE", "value": "/usr/lib/ssl-certs/ca-bundle.crt",
	  "if_exists": "/usr/lib/ssl-certs/ca-bundle.crt"}],
	 "interpreters": [
	  {"name":"python","cmd":["python3"],"code_block_labels":["py","python","python3"],"ext":".py",
	   "env": [{"name": "PYTHONTZPATH", "value": ""}]},
	  {"name":"node","cmd":["node"],"code_block_labels":["js","javascript","node"],"ext":".js",
	   "env": [{"name": "NODE_PATH", "value": "/usr/lib/node_modules", "if_exists": "/usr/lib/node_modules"}]},
	  {"name":"bash","cmd":["bash"],"code_block_labels":["sh","bash"],"ext":".sh"}]}`), 0o644)
	return []string{
		"CODELLM_ADDR=" + addr,
		"CODELLM_API_KEY=" + trip2gKey,
		"CODELLM_ALLOWED_PROGRAMS=python,bash,node",
		"CODELLM_SANDBOX=native",
		"CODELLM_SANDBOX_NETWORK=false",
		"CODELLM_MAX_STDOUT_BYTES=65536",
		"CODELLM_EXPOSE_ENV=GH_TOKEN",
		"CODELLM_EXPOSE_ENV_PREFIX=KRISP_",
		"CODELLM_INTERPRETERS=" + registry,
		"SEAL_KEY=" + sealTestKey,
		"CODELLM_TRIP2G_URL=http://127.0.0.1:8081", // its cookie lane: accepted, ignored
		"KRISP_TOKEN=krisp-env-token", "KRISP_BASE_URL=https://api.krisp.ai", "GH_TOKEN=gh-token", "UNRELATED=nope",
	}
}

// trip2gRole is a role note body written for trip2g's codellm: fleetkit, a sealed secret, its own
// frontmatter as configuration, a note the bag attaches, and a narrowed environment.
const trip2gRole = "```python\n" + `import os, fleetkit
cfg = fleetkit.frontmatter()
bag = fleetkit.bag()
meeting = fleetkit.note_frontmatter("calls/a.md")
env = ",".join(sorted(k for k in os.environ if k.startswith(("KRISP_", "GH_", "UNRELATED"))))
fleetkit.emit([
    fleetkit.note("transcripts/%s.md" % meeting.id, {"title": meeting.title, "source": cfg.krisp_base_url,
                  "created_at": "2026-01-15T10:00:00+00:00"}, "# " + meeting.title + "\n"),
    fleetkit.patch("index.md", "<!-- next -->", "<!-- next -->\n- [[transcripts/%s]]" % meeting.id),
], "auth=%s sealed=%s env=%s missing=%s,%s" % (fleetkit.secrets().krisp_token == "krisp-sealed-token",
    cfg.krisp_token.startswith("sealed:v1:"), env, cfg.nope, fleetkit.secrets().nope))
` + "```\n"

// trip2gNodeRole is the node twin of trip2gRole's secret handling: fleetkit.secrets() holds the opened
// value, fleetkit.frontmatter() still the ciphertext, and neither raises for a missing key.
const trip2gNodeRole = "```js\n" + `const fleetkit = require('fleetkit');
const sec = fleetkit.secrets(), cfg = fleetkit.frontmatter();
fleetkit.emit([], 'auth=' + (sec.krisp_token === 'krisp-sealed-token') + ' sealed=' + cfg.krisp_token.startsWith('sealed:v1:') +
  ' missing=' + sec.nope + ' keys=' + Object.keys(sec).join(','));
` + "```\n"

// trip2gFailingMiddle is a role whose middle block fails after its downstream, the last block, has
// already exited 0 (it closes its stdout first).
const trip2gFailingMiddle = "```bash\necho payload\n```\n```python\n" + `import os, sys, time
sys.stdout.write(sys.stdin.read())
sys.stdout.flush()
os.close(1)  # the last block reads EOF and finishes while this one is still running
time.sleep(0.3)
sys.exit("upload failed")
` + "```\n```python\n" + `import fleetkit, sys
fleetkit.emit([fleetkit.write("out.md", sys.stdin.read())], "done")
` + "```\n"

// trip2gBlob is "krisp-sealed-token" sealed under sealTestKey outside Go (Python's cryptography AESGCM,
// nonce 00..0b), the way trip2g's internal/dataencryption builds a blob: what a vault sealed for trip2g's
// codellm already holds.
const trip2gBlob = "sealed:v1:AAECAwQFBgcICQoLMyYOaQUm6Q/H7FRXv4sZKT20jIyzUw9R1voVj02k6c0JYg=="

func trip2gBag(t *testing.T) map[string]any {
	blob := trip2gBlob
	if got, err := seal.Open(sealTestKey, blob); err != nil || got != "krisp-sealed-token" {
		t.Fatalf("the trip2g-made blob does not open: %q %v", got, err)
	}
	return map[string]any{
		"frontmatter":     map[string]any{"krisp_token": blob, "krisp_base_url": "https://api.krisp.ai", "max": "3"},
		"unseal":          []string{"krisp_token"},
		"env_passthrough": []string{"KRISP_TOKEN"},
		"attached_notes":  []any{map[string]any{"path": "calls/a.md", "content": "---\nid: q1\ntitle: 'Q1: planning'\n---\nbody\n"}},
		"changed_files":   []any{},
		"depth":           1,
	}
}

// A role written for trip2g's codellm, against a codellm started with trip2g's settings only, gives the
// tool calls trip2g's codellm gives: fleetkit's exact note rendering (PyYAML), the patch, and an answer
// proving the sealed secret opened and the environment narrowed to what the role declared.
func TestTrip2gRoleThroughTheRealBinary(t *testing.T) {
	requireNative(t)
	addr := freeAddr(t)
	// No command at all, as trip2g's deployments run it: the environment alone starts the service.
	s := serveWith(t, addr, trip2gEnv(t, addr))

	status, calls, msg := s.chat(t, trip2gRole, trip2gBag(t))
	if status != 200 {
		t.Fatalf("status %d: %s\nlogs:\n%s", status, msg, s.logs.String())
	}
	want := []string{
		`write_note {"path":"transcripts/q1.md","content":"---\ntitle: 'Q1: planning'\nsource: https://api.krisp.ai\ncreated_at: '2026-01-15T10:00:00+00:00'\n---\n# Q1: planning\n"}`,
		`patch_note {"path":"index.md","find":"\u003c!-- next --\u003e","replace":"\u003c!-- next --\u003e\n- [[transcripts/q1]]"}`,
		`finish {"answer":"auth=True sealed=True env=KRISP_TOKEN missing=None,None"}`,
	}
	if fmt.Sprint(calls) != fmt.Sprint(want) && fmt.Sprint(calls) != strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(fmt.Sprint(want)) {
		t.Fatalf("tool calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}

	// fleetkit.secrets() in node: the opened fields only, the ciphertext left in the frontmatter.
	_, calls, msg = s.chat(t, trip2gNodeRole, trip2gBag(t))
	if fmt.Sprint(calls) != `[finish {"answer":"auth=true sealed=true missing=undefined keys=krisp_token"}]` {
		t.Fatalf("node secrets(): %v %s", calls, msg)
	}

	// Without its declaration the same role sees the operator's whole exposure — and never UNRELATED.
	bag := trip2gBag(t)
	delete(bag, "env_passthrough")
	_, calls, _ = s.chat(t, trip2gRole, bag)
	if len(calls) != 3 || !strings.Contains(calls[2], "env=GH_TOKEN,KRISP_BASE_URL,KRISP_TOKEN missing") {
		t.Fatalf("undeclared env: %v", calls)
	}

	// A sealed field that does not open is 422 unseal_error naming it; nothing runs, nothing leaks.
	bag = trip2gBag(t)
	bag["frontmatter"].(map[string]any)["krisp_token"] = seal.Prefix + "AAAA"
	status, _, msg = s.chat(t, trip2gRole, bag)
	if status != 422 || !strings.HasPrefix(msg, `unseal_error: unseal failed for "krisp_token"`) {
		t.Fatalf("bad blob: %d %s", status, msg)
	}

	// A middle block that fails after the last block already exited 0 is 422 naming it, as on trip2g: its
	// writes are not applied. Only SIGPIPE excuses an upstream block (yes | head).
	status, _, msg = s.chat(t, trip2gFailingMiddle, trip2gBag(t))
	if status != 422 || msg != "nonzero_exit: block 2/3: non-zero exit (code 1): upload failed" {
		t.Fatalf("failing middle block: %d %s", status, msg)
	}
	status, calls, msg = s.chat(t, "```bash\nyes\n```\n```bash\nhead -c 3\n```\n```python\nimport fleetkit, sys\nfleetkit.emit([], sys.stdin.read())\n```\n", nil)
	if status != 200 || fmt.Sprint(calls) != `[finish {"answer":"y\ny"}]` {
		t.Fatalf("yes | head: %d %v %s", status, calls, msg)
	}

	// CODELLM_MAX_STDOUT_BYTES took effect: 64 KiB of stdout from the last block is output_limit.
	status, _, msg = s.chat(t, "```bash\nhead -c 70000 /dev/zero\n```\n", nil)
	if status != 422 || !strings.HasPrefix(msg, "output_limit") {
		t.Fatalf("stdout cap: %d %s", status, msg)
	}
	if strings.Contains(s.logs.String(), "krisp-sealed-token") {
		t.Fatal("the opened secret reached codellm's log")
	}
}

// trip2g's fleetkit behaviour cases (fleetkit_behaviour_test.go), both languages, through the endpoint.
func TestFleetkitBehaviourThroughTheRealBinary(t *testing.T) {
	requireNative(t)
	addr := freeAddr(t)
	s := serveWith(t, addr, trip2gEnv(t, addr), "serve")
	note := map[string]string{
		"python": `write_note {"path":"a.md","content":"---\ntitle: 'T: q'\ncreated_at: '2026-01-15T10:00:00+00:00'\ntruthy: 'yes'\npadded: '007'\n---\n# T\n"}`,
		"js":     `write_note {"path":"a.md","content":"---\ntitle: \"T: q\"\ncreated_at: \"2026-01-15T10:00:00+00:00\"\ntruthy: \"yes\"\npadded: \"007\"\n---\n# T\n"}`,
	}
	probes := map[string]string{
		"python": `import fleetkit
fleetkit.emit([
    fleetkit.note("a.md", {"title": "T: q", "created_at": "2026-01-15T10:00:00+00:00", "truthy": "yes", "padded": "007"}, "# T\n"),
    fleetkit.patch("b.md", "old", "new"),
], "done")`,
		"js": `const fleetkit = require('fleetkit');
fleetkit.emit([
  fleetkit.note('a.md', {title: 'T: q', created_at: '2026-01-15T10:00:00+00:00', truthy: 'yes', padded: '007'}, '# T\n'),
  fleetkit.patch('b.md', 'old', 'new'),
], 'done');`,
	}
	frontmatter := map[string]string{
		"python": `import json, fleetkit
cases = {
    "plain": fleetkit.parse_frontmatter("---\ntitle: T\ntags: [a, b]\n---\n# body\n"),
    "none": fleetkit.parse_frontmatter("# just a body\n"),
    "unclosed": fleetkit.parse_frontmatter("---\ntitle: T\n"),
    "notadict": fleetkit.parse_frontmatter("---\n- a\n- b\n---\nbody"),
}
fm = fleetkit.frontmatter()
fleetkit.emit([], json.dumps({"cases": {k: dict(v) for k, v in cases.items()}, "missing": cases["plain"].nope,
    "url": fm.krisp_base_url, "max": fm.max, "depth": fleetkit.bag()["depth"]}, sort_keys=True))`,
		"js": `const fleetkit = require('fleetkit');
const cases = {
  plain: fleetkit.parse_frontmatter('---\ntitle: T\ntags: [a, b]\n---\n# body\n'),
  none: fleetkit.parse_frontmatter('# just a body\n'),
  unclosed: fleetkit.parse_frontmatter('---\ntitle: T\n'),
  notadict: fleetkit.parse_frontmatter('---\n- a\n- b\n---\nbody'),
};
const fm = fleetkit.frontmatter();
fleetkit.emit([], JSON.stringify({cases, missing: cases.plain.nope ?? null,
  url: fm.krisp_base_url, max: fm.max, depth: fleetkit.bag().depth}));`,
	}
	wantFM := `{"cases": {"none": {}, "notadict": {}, "plain": {"tags": ["a", "b"], "title": "T"}, "unclosed": {}}, ` +
		`"depth": 1, "max": "3", "missing": null, "url": "https://api.krisp.ai"}`
	for _, lang := range []string{"python", "js"} {
		_, calls, msg := s.chat(t, "```"+lang+"\n"+probes[lang]+"\n```\n", nil)
		want := []string{note[lang], `patch_note {"path":"b.md","find":"old","replace":"new"}`, `finish {"answer":"done"}`}
		if fmt.Sprint(calls) != fmt.Sprint(want) {
			t.Errorf("%s note/patch/emit: %v %s\nwant %v", lang, calls, msg, want)
		}
		_, calls, msg = s.chat(t, "```"+lang+"\n"+frontmatter[lang]+"\n```\n", trip2gBag(t))
		var answer struct{ Answer string }
		if len(calls) == 1 {
			json.Unmarshal([]byte(strings.TrimPrefix(calls[0], "finish ")), &answer)
		}
		var got, wantV any
		json.Unmarshal([]byte(answer.Answer), &got)
		json.Unmarshal([]byte(wantFM), &wantV)
		if got == nil || !reflect.DeepEqual(got, wantV) {
			t.Errorf("%s frontmatter/bag: %v %s\nwant %s", lang, calls, msg, wantFM)
		}
	}
	// trip2g documents both require and import. ESM resolves through /node_modules in the block's root;
	// a .js block is ESM only where node detects ESM syntax (20.19+, 22.7+).
	if nodeDetectsESM(t) {
		esm := "```js\nimport fleetkit from 'fleetkit';\nimport { note, emit } from 'fleetkit';\n" +
			"emit([note('a.md', {title: 'T: q'}, '# T\\n')], typeof fleetkit.patch);\n```\n"
		_, calls, msg := s.chat(t, esm, nil)
		want := []string{`write_note {"path":"a.md","content":"---\ntitle: \"T: q\"\n---\n# T\n"}`, `finish {"answer":"function"}`}
		if fmt.Sprint(calls) != fmt.Sprint(want) {
			t.Errorf("ESM import: %v %s\nwant %v", calls, msg, want)
		}
	}
	// note_frontmatter of a note the bag does not carry raises: a role misconfiguration, not a finding.
	status, _, msg := s.chat(t, "```python\nimport fleetkit\nfleetkit.note_frontmatter('absent.md')\n```\n", trip2gBag(t))
	if status != 422 || !strings.Contains(msg, "not in the delivery bag") {
		t.Errorf("note_frontmatter of an absent note: %d %s", status, msg)
	}
}

// trip2g's settings beside ours: ours wins with a warning; a short key is refused off loopback.
func TestTrip2gSettingsAliases(t *testing.T) {
	requireNative(t)
	ours, alias := freeAddr(t), freeAddr(t)
	s := serveWith(t, ours, []string{"CODELLM_LISTEN=" + ours, "CODELLM_ADDR=" + alias, "CODELLM_API_KEY=" + trip2gKey}, "serve")
	if !strings.Contains(s.logs.String(), "using codellm's") || !strings.Contains(s.logs.String(), alias) {
		t.Fatalf("no warning about the differing alias:\n%s", s.logs.String())
	}
	// trip2g's binary has no serve subcommand: a command line that starts with a flag serves.
	s2 := serveWith(t, alias, []string{"CODELLM_API_KEY=short-key"}, "-addr", alias, "-trip2g-url", "http://127.0.0.1:8081")
	if !strings.Contains(s2.logs.String(), "shorter than 32") {
		t.Fatalf("no warning about a short key on loopback:\n%s", s2.logs.String())
	}
	// trip2g's cookie lane setting starts the server and is said to be ignored; it opens no way in.
	if !strings.Contains(s2.logs.String(), "--trip2g-url (CODELLM_TRIP2G_URL) is trip2g's browser cookie lane") {
		t.Fatalf("no word about the ignored -trip2g-url:\n%s", s2.logs.String())
	}
	req, _ := http.NewRequest(http.MethodGet, s2.base+"/v1/models", nil)
	req.Header.Set("Cookie", "session=admin")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("a cookie instead of the key: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	_, stderr, code := runBin(t, "", []string{"CODELLM_API_KEY=short-key"}, "-sandbox", "off", "-addr", "0.0.0.0:0")
	if code != 1 || !strings.Contains(stderr, "needs at least 32") {
		t.Fatalf("short key off loopback: exit %d: %s", code, stderr)
	}
}

// nodeDetectsESM reports whether the installed node runs a .js file with import syntax as ESM.
func nodeDetectsESM(t *testing.T) bool {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return false
	}
	var major, minor int
	fmt.Sscanf(strings.TrimSpace(string(out)), "v%d.%d", &major, &minor)
	return major > 22 || major == 22 && minor >= 7 || major == 20 && minor >= 19
}

// trip2g's internal listener (its PR #306) through the real binary: CODELLM_METRICS_ADDR serves /metrics
// without the API key, pprof and the probes; pprof is nowhere on the main listener; a public address
// without authentication, or an address given but taken, stops serve before it serves anything; and
// without the setting the listener is on at trip2g's default address.
func TestTrip2gMetricsListenerThroughTheRealBinary(t *testing.T) {
	requireNative(t)
	addr, maddr := freeAddr(t), freeAddr(t)
	s := serveWith(t, addr, append(trip2gEnv(t, addr), "CODELLM_METRICS_ADDR="+maddr))
	if status, _, msg := s.chat(t, "```bash\necho '{\"answer\":\"x\"}'\n```\n", nil); status != 200 {
		t.Fatalf("chat: %d %s", status, msg)
	}
	metricsBase := "http://" + maddr
	for path, want := range map[string]string{"/metrics": `codellm_http_requests_total{code="",route="chat",status="200"} 1`,
		"/debug/pprof/cmdline": binary(t), "/healthz": "ok", "/livez": "alive", "/readyz": `"ready":true`} {
		if status, body := testhelp.GetBearer(t, metricsBase+path, ""); status != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics listener %s without a key: %d %.300q", path, status, body)
		}
	}
	if status, _ := testhelp.GetBearer(t, s.base+"/debug/pprof/cmdline", trip2gKey); status != 404 {
		t.Errorf("main listener pprof: %d, want 404", status)
	}
	if status, _ := testhelp.GetBearer(t, s.base+"/metrics", ""); status != 401 {
		t.Errorf("main listener /metrics without the key: %d, want 401", status)
	}

	// A public metrics address needs the main listener's authentication; without it serve refuses.
	_, stderr, code := runBin(t, "", []string{"CODELLM_API_KEY=", "CODELLM_METRICS_ADDR=0.0.0.0:0"}, "-sandbox", "off", "-addr", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "refusing to serve the metrics listener on non-loopback address") {
		t.Fatalf("public metrics address without authentication: exit %d: %s", code, stderr)
	}
	// The metrics listener needs an address of its own.
	_, stderr, code = runBin(t, "", []string{"CODELLM_METRICS_ADDR=127.0.0.1:1"}, "-sandbox", "off", "-addr", "127.0.0.1:1")
	if code != 1 || !strings.Contains(stderr, "--metrics-listen and --listen are both 127.0.0.1:1") {
		t.Fatalf("metrics address = listen address: exit %d: %s", code, stderr)
	}
	// An address the operator gave must bind.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, stderr, code = runBin(t, "", []string{"CODELLM_METRICS_ADDR=" + taken.Addr().String()}, "-sandbox", "off", "-addr", "127.0.0.1:0")
	if code != 1 || !strings.Contains(stderr, "--metrics-listen: listen tcp") {
		t.Fatalf("metrics address taken: exit %d: %s", code, stderr)
	}

	// Without the setting it is on, at trip2g's default; when another process holds that port, serve
	// says so and serves without it.
	other := freeAddr(t)
	d := serveWith(t, other, []string{"CODELLM_LISTEN=" + other}, "serve")
	switch logs := d.logs.String(); {
	case strings.Contains(logs, "metrics_listen=127.0.0.1:18087") && strings.Contains(logs, "metrics listener serving"):
		if status, body := testhelp.GetBearer(t, "http://127.0.0.1:18087/livez", ""); status != 200 || body != "alive" {
			t.Errorf("default metrics listener: %d %q", status, body)
		}
	case strings.Contains(logs, "metrics listener not started: its default address is taken") &&
		strings.Contains(logs, "metrics_listen=127.0.0.1:18087"):
		t.Log("127.0.0.1:18087 is held by another process here; serve started without its metrics listener, as it should")
	default:
		t.Errorf("no sign of the default metrics listener in the log:\n%s", logs)
	}
}

// postSeal posts the sealing form's JSON to url (with the bearer key when key is set) and returns the
// status and the blob.
func postSeal(t *testing.T, url, key, value string) (int, string) {
	t.Helper()
	raw, _ := json.Marshal(map[string]string{"env_key": "SEAL_KEY", "value": value})
	hdr := map[string]string{}
	if key != "" {
		hdr["Authorization"] = "Bearer " + key
	}
	status, _, body := testhelp.PostJSON(t, url, raw, hdr)
	var out struct{ Sealed string }
	json.Unmarshal(body, &out)
	return status, out.Sealed
}

// trip2g's CODELLM_SEAL_PATH (its PR #322) through the real binary: the form moves to that path on the
// main listener (behind the API key, as trip2g gates it) and on the debug listener; a blob sealed there
// opens in a role through fleetkit.secrets(); a path codellm serves itself is refused at startup.
func TestTrip2gSealPathThroughTheRealBinary(t *testing.T) {
	requireNative(t)
	addr, dbg := freeAddr(t), freeAddr(t)
	s := serveWith(t, addr, append(trip2gEnv(t, addr), "CODELLM_SEAL_PATH=/ops/seal", "CODELLM_DEBUG_LISTEN="+dbg, "CODELLM_METRICS_ADDR="))
	if status, body := testhelp.GetBearer(t, s.base+"/ops/seal", trip2gKey); status != 200 || !strings.Contains(body, `name="value"`) {
		t.Fatalf("main listener form: %d %.200q", status, body)
	}
	if status, _ := testhelp.GetBearer(t, s.base+"/ops/seal", ""); status != 401 {
		t.Fatalf("main listener form without the key: %d, want 401", status)
	}
	if status, _ := testhelp.GetBearer(t, s.base+"/_system/codellm/seal", trip2gKey); status != 404 {
		t.Fatalf("the default path after moving it: %d, want 404", status)
	}
	status, blob := postSeal(t, s.base+"/ops/seal", trip2gKey, "krisp-sealed-token")
	if status != 200 || !strings.HasPrefix(blob, seal.Prefix) {
		t.Fatalf("main listener seal: %d %q", status, blob)
	}
	if status, body := testhelp.GetBearer(t, "http://"+dbg+"/ops/seal", ""); status != 200 || !strings.Contains(body, `name="value"`) {
		t.Fatalf("debug listener form: %d %.200q", status, body)
	}
	status, dblob := postSeal(t, "http://"+dbg+"/ops/seal", "", "krisp-sealed-token")
	if got, err := seal.Open(sealTestKey, dblob); status != 200 || err != nil || got != "krisp-sealed-token" {
		t.Fatalf("debug listener seal: %d %q %v", status, got, err)
	}
	// What the form sealed is what a role opens.
	bag := trip2gBag(t)
	bag["frontmatter"].(map[string]any)["krisp_token"] = blob
	status, calls, msg := s.chat(t, trip2gNodeRole, bag)
	if status != 200 || len(calls) != 1 || !strings.Contains(calls[0], "auth=true sealed=true") {
		t.Fatalf("role with the form's blob: %d %v %s", status, calls, msg)
	}

	_, stderr, code := runBin(t, "", []string{"CODELLM_SEAL_PATH=/v1/seal"}, "-sandbox", "off", "-addr", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, `CODELLM_SEAL_PATH="/v1/seal" (--seal-path): /v1/seal is served by codellm itself`) {
		t.Fatalf("a seal path codellm serves: exit %d: %s", code, stderr)
	}
}

// trip2g's metric names through the real binary: after the runs a trip2g dashboard watches (a role
// writing and patching, a failing block, a retried call, a refused key), its scrape of
// CODELLM_METRICS_ADDR finds every one of trip2g's series, with trip2g's labels and the values the runs
// gave them.
func TestTrip2gMetricNamesThroughTheRealBinary(t *testing.T) {
	requireNative(t)
	addr, maddr := freeAddr(t), freeAddr(t)
	s := serveWith(t, addr, append(trip2gEnv(t, addr), "CODELLM_METRICS_ADDR="+maddr))
	if status, calls, msg := s.chat(t, trip2gRole, trip2gBag(t)); status != 200 || len(calls) != 3 {
		t.Fatalf("role: %d %v %s", status, calls, msg)
	}
	if status, _, _ := s.chat(t, trip2gFailingMiddle, nil); status != 422 {
		t.Fatalf("failing role: %d", status)
	}
	body := map[string]any{"model": "codellm", "messages": []map[string]string{{"role": "user", "content": "```bash\necho '{\"answer\":\"once\"}'\n```"}}}
	hdr := map[string]string{"Authorization": "Bearer " + trip2gKey, "Idempotency-Key": "trip2g-retry-1"}
	for i := 0; i < 2; i++ {
		if status, _, raw := postRaw(t, s.base+"/v1/chat/completions", body, hdr); status != 200 {
			t.Fatalf("keyed call %d: %d %s", i, status, raw)
		}
	}
	if status, _ := testhelp.GetBearer(t, s.base+"/v1/models", "not-the-key"); status != 401 {
		t.Fatalf("wrong key: %d", status)
	}
	status, scrape := testhelp.GetBearer(t, "http://"+maddr+"/metrics", "")
	if status != 200 {
		t.Fatalf("scrape: %d", status)
	}
	for _, want := range []string{
		`codellm_requests_total{endpoint="chat_completions",status="200"} 3`,
		`codellm_requests_total{endpoint="chat_completions",status="422"} 1`,
		`codellm_request_duration_seconds_count{endpoint="chat_completions"} 4`,
		`codellm_requests_in_flight 0`,
		`codellm_auth_total{lane="apikey",result="allowed"} 4`,
		`codellm_auth_total{lane="apikey",result="denied"} 1`,
		`codellm_exec_errors_total{kind="nonzero_exit"} 1`,
		`codellm_exec_replays_total 1`,
		`codellm_blocks_total{outcome="ok",program="python"} 2`, // the role, the failing role's last block
		`codellm_blocks_total{outcome="nonzero_exit",program="python"} 1`,
		`codellm_blocks_total{outcome="ok",program="bash"} 2`,
		`codellm_block_exit_codes_total{exit_code="1",program="python"} 1`,
		`codellm_block_duration_seconds_count{program="python"} 3`,
		`codellm_block_max_rss_bytes_count{program="python"} 3`,
		`codellm_block_stdout_bytes_count{program="python"} 2`,
		`codellm_request_blocks_count 3`,
		`codellm_changes_total{kind="write"} 1`,
		`codellm_changes_total{kind="patch"} 1`,
		`codellm_config_info{allowed_programs="bash,node,python",sandbox_mode="native",sandbox_network="false"} 1`,
		// codellm_block_stdout_truncated_total and codellm_sandbox_fallbacks_total appear with their first
		// event (an output_limit run; a besteffort run): internal/server's TestDocumentedMetricsExposed.
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", strings.Join(slices.DeleteFunc(strings.Split(scrape, "\n"), func(l string) bool {
			return !strings.HasPrefix(l, "codellm_")
		}), "\n"))
	}
}
