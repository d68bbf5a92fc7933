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
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/testhelp"
)

// TestMain removes the binary's build directory when the tests are done (it was left in the temp dir on
// every run).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binDir holds the codellm binary built for the end-to-end tests.
var binDir string

// binary builds codellm once per test binary: the end-to-end tests below run it as a real process, the
// way operators and role authors do.
var binary = func() func(t *testing.T) string {
	var path string
	var err error
	built := false
	return func(t *testing.T) string {
		t.Helper()
		if !built {
			built = true
			dir, e := os.MkdirTemp("", "codellm-bin-")
			if e != nil {
				t.Fatal(e)
			}
			binDir = dir
			path = filepath.Join(dir, "codellm")
			build := exec.Command("go", "build", "-o", path, ".")
			build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as released: a cgo build refuses native
			out, e := build.CombinedOutput()
			if e != nil {
				err = fmt.Errorf("go build: %v\n%s", e, out)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		return path
	}
}()

// requireNative skips where the host cannot run the default sandbox (a failure under CODELLM_REQUIRE_SANDBOX=1).
func requireNative(t *testing.T) {
	t.Helper()
	if rep := sandbox.Probe(sandbox.Config{Mode: sandbox.ModeNative}); !rep.Ready {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("native sandbox unavailable (missing %v) and CODELLM_REQUIRE_SANDBOX=1", rep.Missing)
		}
		t.Skipf("native sandbox unavailable here (missing %v)", rep.Missing)
	}
}

func freeAddr(t *testing.T) string { return "127.0.0.1:" + testhelp.FreePort(t) }

// syncBuffer is a served codellm's log, read while it is written.
type syncBuffer = testhelp.SyncBuffer

func newSyncBuffer() *syncBuffer { return &testhelp.SyncBuffer{} }

const fleetBody = "Keep index/changed.md in sync with the changed files.\n\n```python\nimport json, os\nbag = json.load(open(os.environ[\"FLEET_INPUT\"]))\nfor f in bag.get(\"changed_files\") or []:\n    print(f[\"path\"])\n```\n\n```python\nimport json, sys\npaths = [l.strip() for l in sys.stdin if l.strip()]\nlinks = \"\".join(\"- [[%s]]\\n\" % p for p in paths)\nprint(json.dumps({\"changes\": [\n    {\"path\": \"index/changed.md\", \"content\": \"# Changed\\n\" + links},\n    {\"path\": \"index/log.md\", \"find\": \"<!-- next -->\", \"replace\": \"<!-- next -->\\n\" + links}],\n  \"answer\": \"indexed %d file(s)\" % len(paths)}))\n```\n"

const fleetBag = `{"changed_files":[{"path":"notes/a.md","event":"update","path_id":11,"version":4,"title":"A","content":"…"},{"path":"notes/b.md","event":"create","path_id":12,"version":1,"title":"B","content":"…"}],"change_file":null,"attached_notes":null,"depth":1}`

// The "done when": `codellm serve` with its defaults (native sandbox) answers a python block, a
// bash→python pipeline and a fleet-shaped request exactly as the contract says, then stops cleanly on SIGTERM.
func TestServeDefaultsEndToEnd(t *testing.T) {
	requireNative(t)
	bin := binary(t)
	addr := freeAddr(t)
	workDir := newWorkDir(t)
	cmd := exec.Command(bin, "serve", "--listen", addr, "--work-dir", workDir)
	cmd.Env = append(os.Environ(), "CODELLM_API_KEY=e2e-key")
	logs := newSyncBuffer()
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer testhelp.StopGracefully(cmd.Process, exited, stopGrace) // when the test ends before its SIGTERM
	base := "http://" + addr
	if sb := waitReady(t, base, exited, logs); sb != "native" {
		t.Fatalf("default sandbox %q, want native", sb)
	}
	post := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer e2e-key")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	calls := func(body string) []string {
		t.Helper()
		status, out := post(body)
		if status != 200 {
			t.Fatalf("status %d: %s", status, out)
		}
		var c chatReply
		if err := json.Unmarshal([]byte(out), &c); err != nil {
			t.Fatal(err)
		}
		return c.calls()
	}
	msg := func(role, content string) map[string]any { return map[string]any{"role": role, "content": content} }
	req := func(msgs ...map[string]any) string {
		b, _ := json.Marshal(map[string]any{"model": "codellm", "messages": msgs})
		return string(b)
	}

	got := calls(req(msg("user", "```python\nprint('{\"answer\": \"py\"}')\n```")))
	if fmt.Sprint(got) != `[finish {"answer":"py"}]` {
		t.Fatalf("python block: %v", got)
	}
	got = calls(req(msg("user", "```bash\nprintf hello\n```\n```python\nimport sys, json\nprint(json.dumps({'changes': [{'path': 'n.md', 'content': sys.stdin.read()}]}))\n```")))
	if fmt.Sprint(got) != `[write_note {"path":"n.md","content":"hello"} finish {"answer":""}]` {
		t.Fatalf("bash→python: %v", got)
	}
	bag := msg("system", fleetBag)
	bag["name"] = "fleet_input"
	got = calls(req(msg("system", "<wrapper>\n\nInstruction:\n"+fleetBody), bag, msg("user", "Begin.")))
	want := []string{
		`write_note {"path":"index/changed.md","content":"# Changed\n- [[notes/a.md]]\n- [[notes/b.md]]\n"}`,
		`patch_note {"path":"index/log.md","find":"<!-- next -->","replace":"<!-- next -->\n- [[notes/a.md]]\n- [[notes/b.md]]\n"}`,
		`finish {"answer":"indexed 2 file(s)"}`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fleet request:\n got  %q\n want %q", got, want)
	}
	if status, _ := post(`{}`); status != 400 {
		t.Fatalf("bad request: %d", status)
	}
	// A runner session outlives its request: its workspace (a tmpfs with the default
	// --runner-workspace-size, as root) is for the shutdown below to unmount.
	sess, _ := http.NewRequest(http.MethodPost, base+"/api/v2/execute",
		strings.NewReader(`{"language":"bash","version":"*","files":[{"content":"echo kept > f"}]}`))
	sess.Header.Set("Authorization", "Bearer e2e-key")
	sess.Header.Set("Content-Type", "application/json")
	sess.Header.Set("X-Runtime-Session-Id", "e2e-shutdown")
	if resp, err := http.DefaultClient.Do(sess); err != nil || resp.StatusCode != 200 {
		t.Fatalf("session execute: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Graceful shutdown: an in-flight run finishes, then the process exits 0 leaving no workdir.
	slow := make(chan string, 1)
	go func() {
		status, out := post(req(msg("user", "```bash\nsleep 2; echo '{\"answer\":\"late\"}'\n```")))
		slow <- fmt.Sprint(status, " ", out)
	}()
	time.Sleep(500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case out := <-slow:
		if !strings.HasPrefix(out, "200 ") || !strings.Contains(out, "late") {
			t.Fatalf("in-flight request during shutdown: %s", out)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("in-flight request did not finish")
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("serve exited with %v; logs:\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	if entries, _ := os.ReadDir(workDir); len(entries) != 0 {
		t.Fatalf("workdirs left behind: %v", entries)
	}
	if m := testhelp.MountsUnder(t, workDir); len(m) != 0 {
		t.Fatalf("mounts left behind: %q", m)
	}
	if strings.Contains(logs.String(), "e2e-key") {
		t.Fatal("the API key reached the log")
	}
}

func TestServeListenerRule(t *testing.T) {
	bin := binary(t)
	out, err := exec.Command(bin, "serve", "--sandbox", "off", "--listen", "0.0.0.0:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--insecure-public") || !strings.Contains(string(out), "--api-key") {
		t.Fatalf("public listener without auth: err %v, output %s", err, out)
	}
}

// codellm run / blocks: the role author's local loop, through the same pipeline and sandbox.
func TestRunAndBlocksCommands(t *testing.T) {
	requireNative(t)
	bin := binary(t)
	dir := t.TempDir()
	role := filepath.Join(dir, "role.md")
	os.WriteFile(role, []byte(fleetBody), 0o644)
	bagFile := filepath.Join(dir, "bag.json")
	os.WriteFile(bagFile, []byte(fleetBag), 0o644)

	out, err := exec.Command(bin, "run", "--input", bagFile, role).Output()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var calls []struct {
		ID       string                           `json:"id"`
		Function struct{ Name, Arguments string } `json:"function"`
	}
	if err := json.Unmarshal(out, &calls); err != nil || len(calls) != 3 || calls[2].Function.Name != "finish" ||
		calls[2].Function.Arguments != `{"answer":"indexed 2 file(s)"}` || calls[0].ID != "call_0" {
		t.Fatalf("run output %s (%v)", out, err)
	}
	out, err = exec.Command(bin, "run", "--changes", "--input", bagFile, role).Output()
	if err != nil || !strings.Contains(string(out), `"changes"`) || !strings.Contains(string(out), "indexed 2 file(s)") {
		t.Fatalf("run --changes: %v %s", err, out)
	}
	// A failing block: exit 1 and the contract's message on stderr.
	bad := filepath.Join(dir, "bad.md")
	os.WriteFile(bad, []byte("```bash\necho boom >&2; exit 3\n```\n"), 0o644)
	cmd := exec.Command(bin, "run", bad)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "block 1/1: non-zero exit (code 3): boom") {
		t.Fatalf("failing run: %v %s", err, stderr.String())
	}
	// The command closed its Sandbox: no cgroup of its pool is left for the next codellm to sweep.
	if left := testhelp.CgroupsOf(t, cmd.Process.Pid); len(left) > 0 {
		t.Fatalf("codellm run left its cgroups behind: %v", left)
	}
	// Flags from the environment: CODELLM_MAX_BLOCKS=1 refuses two blocks.
	cmd = exec.Command(bin, "run", role)
	cmd.Env = append(os.Environ(), "CODELLM_MAX_BLOCKS=1")
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "2 code blocks exceed the limit of 1") {
		t.Fatalf("CODELLM_MAX_BLOCKS: %v %s", err, stderr.String())
	}
	// blocks lists programs and errors.
	mixed := filepath.Join(dir, "mixed.md")
	os.WriteFile(mixed, []byte("```py\npass\n```\n```kotlin\nx\n```\n"), 0o644)
	out, err = exec.Command(bin, "blocks", "--json", mixed).Output()
	if err == nil {
		t.Fatal("blocks with an unknown language exited 0")
	}
	var listing struct {
		Blocks []struct{ Lang, Program, Error string } `json:"blocks"`
	}
	if e := json.Unmarshal(out, &listing); e != nil || len(listing.Blocks) != 2 || listing.Blocks[0].Program != "python" ||
		!strings.Contains(listing.Blocks[1].Error, `language "kotlin" is not supported`) {
		t.Fatalf("blocks output %s (%v)", out, e)
	}
}

func TestDoctorCommand(t *testing.T) {
	requireNative(t)
	bin := binary(t)
	out, err := exec.Command(bin, "doctor").CombinedOutput()
	if err != nil {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	for _, mech := range []string{"userns", "pidns", "landlock", "seccomp", "cgroup", "overlay"} {
		if !strings.Contains(string(out), mech) {
			t.Errorf("doctor output lacks %s:\n%s", mech, out)
		}
	}
	// Issue 14: the new protections are reported.
	for _, p := range []string{"protection: socket families", "protection: tmpfs inodes", "protection: masked /proc files: cmdline",
		"protection: listener Host", "protection: listener Origin", "protection: listener limits", "protection: runner sessions", "protection: host Unix sockets"} {
		if !strings.Contains(string(out), p) {
			t.Errorf("doctor output lacks %q:\n%s", p, out)
		}
	}
	out, err = exec.Command(bin, "doctor", "--json").Output()
	var rep struct {
		Ready       bool     `json:"ready"`
		Protections []string `json:"protections"`
	}
	if err != nil || json.Unmarshal(out, &rep) != nil || !rep.Ready || len(rep.Protections) < 7 {
		t.Fatalf("doctor --json: %v %s", err, out)
	}
}

func TestVersionAndHelp(t *testing.T) {
	bin := binary(t)
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "codellm ") {
		t.Fatalf("version: %v %q", err, out)
	}
	for _, sub := range []string{"serve", "run", "blocks", "doctor", "debug", "worker", "hub", "workspace", "packages"} {
		out, _ := exec.Command(bin, sub, "--help").CombinedOutput()
		if !strings.Contains(strings.ToLower(string(out)), "usage") {
			t.Errorf("%s --help: %s", sub, out)
		}
	}
	if err := exec.Command(bin, "nope").Run(); err == nil {
		t.Fatal("unknown command exited 0")
	}
	// Issue 41: `hub --help` and `worker --help` showed one subcommand's flags and never named the others.
	for sub, want := range map[string][]string{"hub": {"serve", "pair <workerId>", "revoke <workerId>", "status <workerId>"},
		"worker":   {"pair <url> <code>", "run [flags]", "reset-workspace <runtimeSessionId>", "clear-workspace-quarantine"},
		"packages": {"add python|node NAME", "list [--json]", "remove NAME"}} {
		out, err := exec.Command(bin, sub, "--help").CombinedOutput()
		for _, w := range want {
			if err != nil || !strings.Contains(string(out), "\n  "+w) {
				t.Errorf("%s --help (%v) lacks the subcommand %q:\n%s", sub, err, w, out)
			}
		}
	}
}

// Issue 41: a usage error is its one line and where --help is, never a screen of usage; flags are
// named as they are spelled (two dashes); each kind of failure has its exit code.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "role.md")
	os.WriteFile(body, []byte("```bash\necho '{}'\n```\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", body, "--max-output-bytes", "lots"}, 2, `codellm run: --max-output-bytes="lots": invalid size "lots"`},
		{[]string{"run", body, "--no-such-flag"}, 2, "codellm run: unknown flag --no-such-flag"},
		{[]string{"run", body, "--input"}, 2, "codellm run: --input needs a value"},
		{[]string{"run", body, "--input", filepath.Join(dir, "missing.json")}, 2, "codellm run: --input: open "},
		{[]string{"run"}, 2, "codellm run: want exactly one FILE.md (or - for stdin), got 0 arguments"},
		{[]string{"doctor", "--sandbox", "strict"}, 2, `codellm doctor: --sandbox: invalid sandbox config: unknown sandbox mode "strict"`},
		{[]string{"serve", "extra"}, 2, `codellm serve: unexpected argument "extra"`},
		{[]string{"hub", "pair"}, 2, "codellm hub pair: want one valid <workerId>"},
		{[]string{"worker", "pair", "http://127.0.0.1:1/v1"}, 2, "codellm worker pair: want <url> <code> --worker-id <id>"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		hint := "see 'codellm " + strings.Join(c.args[:1+map[bool]int{true: 1}[c.args[0] == "hub" || c.args[0] == "worker"]], " ") + " --help'"
		if code != c.code || !strings.HasPrefix(stderr.String(), c.want) || len(lines) != 2 || lines[1] != hint {
			t.Errorf("%q: exit %d (want %d), stderr:\n%s\nwant %q then %q", c.args, code, c.code, stderr.String(), c.want, hint)
		}
	}
}

// Issue 41: "codellm serving" was logged before the port turned out to be taken. A taken port now stops
// serve before that line, with its own exit code (the host's, 6), naming the flag and the address.
func TestServeTakenPort(t *testing.T) {
	bin := binary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := exec.Command(bin, "serve", "--sandbox", "off", "--listen", ln.Addr().String(), "--work-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 6 || !strings.Contains(string(out), "codellm serve: --listen "+ln.Addr().String()+": ") ||
		!strings.Contains(string(out), "address already in use") || strings.Contains(string(out), "codellm serving") {
		t.Fatalf("serve on a taken port: %v, exit %d:\n%s", err, code, out)
	}
}

// Issue 41: a program that is not installed was reported as "not allowed" (nobody disallowed it), and
// the start-up line promised chat the compiled languages it refuses.
func TestNotInstalledIsNotNotAllowed(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	reg := filepath.Join(dir, "interpreters.json")
	os.WriteFile(reg, []byte(`{"interpreters": [
		{"name": "bash", "cmd": ["bash"], "code_block_labels": ["sh", "bash"], "ext": ".sh"},
		{"name": "cobol", "cmd": ["no-such-cobol-compiler"], "code_block_labels": ["cobol"], "ext": ".cob"}]}`), 0o644)
	body := filepath.Join(dir, "role.md")
	os.WriteFile(body, []byte("```cobol\nDISPLAY 'HI'.\n```\n"), 0o644)
	out, err := exec.Command(bin, "blocks", body, "--interpreters", reg).CombinedOutput()
	want := `code block 1: program "cobol" is not installed on this host ("no-such-cobol-compiler" is not in /usr/local/bin:/usr/bin:/bin; installed: bash)`
	if err == nil || !strings.Contains(string(out), want) || strings.Contains(string(out), "not allowed") {
		t.Fatalf("blocks: %v\n%s\nwant %s", err, out, want)
	}
	out, _ = exec.Command(bin, "blocks", body, "--interpreters", reg, "--allowed-programs", "bash").CombinedOutput()
	if !strings.Contains(string(out), `program "cobol" is not allowed (allowed: bash)`) {
		t.Fatalf("blocks with --allowed-programs: %s", out)
	}
}
