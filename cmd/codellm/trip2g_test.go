package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
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
], "auth=%s env=%s missing=%s" % (bag["secrets"]["krisp_token"] == "krisp-sealed-token", env, cfg.nope))
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
		`finish {"answer":"auth=True env=KRISP_TOKEN missing=None"}`,
	}
	if fmt.Sprint(calls) != fmt.Sprint(want) && fmt.Sprint(calls) != strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(fmt.Sprint(want)) {
		t.Fatalf("tool calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
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
	s2 := serveWith(t, alias, []string{"CODELLM_API_KEY=short-key"}, "-addr", alias)
	if !strings.Contains(s2.logs.String(), "shorter than 32") {
		t.Fatalf("no warning about a short key on loopback:\n%s", s2.logs.String())
	}
	_, stderr, code := runBin(t, "", []string{"CODELLM_API_KEY=short-key"}, "-sandbox", "off", "-addr", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, "needs at least 32") {
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
