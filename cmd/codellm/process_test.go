package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/testhelp"
)

// stopGrace bounds how long a stopping test waits for `serve` to exit on SIGTERM before it SIGKILLs it: a
// hang detector, not a timed assertion (a server with nothing in flight exits at once).
const stopGrace = 20 * time.Second

// newWorkDir makes a fresh --work-dir for a served binary (testhelp.NewWorkDir).
func newWorkDir(t *testing.T) string { return testhelp.NewWorkDir(t, "codellm-e2e-") }

// serveProc is a running `codellm serve` started by startServeProc.
type serveProc struct {
	base, workDir string
	cmd           *exec.Cmd
	exited        chan error
	stopOnce      sync.Once
	graceful      bool
}

// stop ends the server (SIGTERM, then SIGKILL after stopGrace) once and reports whether SIGTERM sufficed.
func (s *serveProc) stop() bool {
	s.stopOnce.Do(func() { s.graceful = testhelp.StopGracefully(s.cmd.Process, s.exited, stopGrace) })
	return s.graceful
}

// startServe runs the real binary's `serve` on a free loopback port until the test ends and returns its
// base URL once /readyz says ready.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	return startServeProc(t, args...).base
}

// startServeProc is startServe for a test that also looks at the work dir or stops the server itself.
// At cleanup the server is stopped (if the test has not) and its work dir removed, mounts and all. A
// server that lost its port to another test between freeAddr and its bind (the packages' tests run in
// parallel) is started again on another.
func startServeProc(t *testing.T, args ...string) *serveProc {
	t.Helper()
	requireNative(t)
	bin := binary(t)
	for attempt := 1; ; attempt++ {
		addr := freeAddr(t)
		s := &serveProc{base: "http://" + addr, workDir: newWorkDir(t), exited: make(chan error, 1)}
		s.cmd = exec.Command(bin, append([]string{"serve", "--listen", addr, "--work-dir", s.workDir}, args...)...)
		logs := newSyncBuffer()
		s.cmd.Stderr = logs
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { s.exited <- s.cmd.Wait() }()
		t.Cleanup(func() { s.stop() })
		_, err := readyOrExit(s.base, s.exited, logs)
		if err == nil {
			return s
		}
		if attempt < 3 && strings.Contains(logs.String(), "address already in use") {
			continue
		}
		t.Fatal(err)
	}
}

// waitReady polls base's /readyz until it says ready (returning the sandbox mode it reports), failing the
// test when the server exits first or is not ready within 60 s.
func waitReady(t *testing.T, base string, exited chan error, logs *syncBuffer) string {
	t.Helper()
	sb, err := readyOrExit(base, exited, logs)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// readyOrExit is waitReady's poll: the sandbox mode once ready, or why not.
func readyOrExit(base string, exited chan error, logs *syncBuffer) (string, error) {
	for deadline := time.Now().Add(60 * time.Second); ; {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			var rd struct {
				Ready   bool   `json:"ready"`
				Sandbox string `json:"sandbox"`
			}
			json.NewDecoder(resp.Body).Decode(&rd)
			resp.Body.Close()
			if rd.Ready {
				return rd.Sandbox, nil
			}
		}
		select {
		case err := <-exited:
			exited <- err
			return "", fmt.Errorf("serve exited early (%v); logs:\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("not ready within 60s; logs:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// chatReply is the part of a chat.completion (or its error envelope) the real-binary tests read.
type chatReply struct {
	Choices []struct {
		Message struct {
			ToolCalls []struct {
				Function struct{ Name, Arguments string } `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Error struct{ Code, Message string } `json:"error"`
}

// calls lists the first choice's tool calls as "name arguments".
func (c *chatReply) calls() []string {
	var got []string
	for _, tc := range c.Choices[0].Message.ToolCalls {
		got = append(got, tc.Function.Name+" "+tc.Function.Arguments)
	}
	return got
}

func postJSON(t *testing.T, url string, body any, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: status %d: %s", url, resp.StatusCode, raw.String())
	}
	if err := json.Unmarshal(raw.Bytes(), out); err != nil {
		t.Fatalf("%v: %s", err, raw.String())
	}
}

type pistonRun struct {
	Stdout, Stderr string
	Code           *int
	Signal         *string
	Status         *string
}

func execute(t *testing.T, base, lang, code string, extra map[string]any) pistonRun {
	t.Helper()
	req := map[string]any{"language": lang, "version": "*", "files": []map[string]string{{"content": code}}}
	for k, v := range extra {
		req[k] = v
	}
	var resp struct{ Run pistonRun }
	postJSON(t, base+"/api/v2/execute", req, &resp)
	return resp.Run
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// The user's program is not PID 1 of its namespace (the sandbox helper stays as its init), so it gets
// the process semantics of a shell: each case below was answered wrongly while the program was PID 1
// (kill -9 $$ and kill -TERM $$ "exited" with the next command's code, os.abort() was a SIGSEGV). The
// differential counterpart, with the program as PID 1, is internal/sandbox's TestInitGivesShellSignalSemantics.
func TestProcessSemanticsEndToEnd(t *testing.T) {
	base := startServe(t, "--debug-extension")
	for _, c := range []struct{ name, lang, code, signal string }{
		{"kill -9 $$", "bash", "kill -9 $$\nexit 3", "SIGKILL"},
		{"kill -TERM $$", "bash", "kill -TERM $$\nexit 4", "SIGTERM"},
		{"python SIGKILL itself", "python", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "SIGKILL"},
		{"os.abort", "python", "import os\nos.abort()", "SIGABRT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := execute(t, base, c.lang, c.code, nil)
			if r.Code != nil || str(r.Signal) != c.signal || str(r.Status) != "SG" {
				t.Fatalf("code %v signal %s status %s (stderr %q), want code null, signal %s, status SG",
					r.Code, str(r.Signal), str(r.Status), r.Stderr, c.signal)
			}
		})
	}
	t.Run("timeout sends SIGTERM first", func(t *testing.T) {
		code := "import signal, sys, time\n" +
			"def bye(*_):\n    print('got SIGTERM', flush=True)\n    sys.exit(9)\n" +
			"signal.signal(signal.SIGTERM, bye)\nprint('up', flush=True)\ntime.sleep(60)\n"
		r := execute(t, base, "python", code, map[string]any{"run_timeout": 1500})
		if str(r.Status) != "TO" || r.Stdout != "up\ngot SIGTERM\n" {
			t.Fatalf("status %s stdout %q, want TO and the handler's output", str(r.Status), r.Stdout)
		}
		// Without a handler the SIGTERM ends it (as PID 1 it was ignored until the SIGKILL).
		r = execute(t, base, "bash", "echo up; sleep 60", map[string]any{"run_timeout": 1000})
		if str(r.Status) != "TO" || str(r.Signal) != "SIGTERM" {
			t.Fatalf("status %s signal %s, want TO with SIGTERM", str(r.Status), str(r.Signal))
		}
	})
	t.Run("nothing outlives the block", func(t *testing.T) {
		// A daemon (setsid, double fork) that would keep rewriting a file in the session's workspace.
		id := "proc-e2e-1"
		daemon := "(setsid sh -c 'while :; do date > alive; sleep 0.05; done' &)\necho started"
		r := executeIn(t, base, id, "bash", daemon)
		if r.Stdout != "started\n" || r.Code == nil || *r.Code != 0 {
			t.Fatalf("daemon start: %+v", r)
		}
		r = executeIn(t, base, id, "bash", "rm -f alive; sleep 0.5; if [ -e alive ]; then echo survived; else echo gone; fi")
		if r.Stdout != "gone\n" {
			t.Fatalf("a daemon of the previous execute survived it: %q", r.Stdout)
		}
	})
	t.Run("pipeline head dies of SIGPIPE, excused", func(t *testing.T) {
		body := map[string]any{"model": "codellm", "x_codellm_debug": true, "messages": []map[string]string{{"role": "user",
			"content": "```bash\nexec yes\n```\n```python\nimport sys, json\nsys.stdin.readline()\nprint(json.dumps({'answer': 'ok'}))\n```"}}}
		var resp struct {
			Debug struct {
				Blocks []struct {
					Outcome string  `json:"outcome"`
					Signal  *string `json:"signal"`
				} `json:"blocks"`
			} `json:"x_codellm_debug"`
		}
		postJSON(t, base+"/v1/chat/completions", body, &resp)
		b := resp.Debug.Blocks
		if len(b) != 2 || b[0].Outcome != "excused" || str(b[0].Signal) != "SIGPIPE" || b[1].Outcome != "ok" {
			t.Fatalf("blocks %+v, want the head excused after SIGPIPE", b)
		}
	})
}

func executeIn(t *testing.T, base, session, lang, code string) pistonRun {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"language": lang, "version": "*", "files": []map[string]string{{"content": code}}})
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v2/execute", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Runtime-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Run pistonRun }
	var raw bytes.Buffer
	raw.ReadFrom(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(raw.Bytes(), &out) != nil {
		t.Fatalf("status %d: %s", resp.StatusCode, strings.TrimSpace(raw.String()))
	}
	return out.Run
}

// Inside the sandbox a program sees fixed paths, never the host's: the runner's workspace (one-off or
// session) is /mnt/data — $PWD, argv and tracebacks name it — and no codellm-runner-… temporary directory
// shows anywhere, /proc/self/mountinfo included; chat blocks likewise run in /mnt/data. The mountinfo
// half needs each workspace to be a filesystem of its own (--runner-workspace-size, root only): a bind
// mount's line names its source directory.
func TestNeutralPathsEndToEnd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--runner-workspace-size needs root")
	}
	s := startServeProc(t, "--runner-workspace-size", "16MiB")
	base := s.base
	probe := "import os, sys, traceback\n" +
		"print(os.getcwd()); print(os.environ.get('HOME')); print(sys.argv[0])\n" +
		"print(open('/proc/self/mountinfo').read()); print(open('/proc/self/cmdline').read())\n" +
		"open('/mnt/data/made.txt', 'w').write('x')\n" +
		"raise RuntimeError('where am I')\n"
	check := func(t *testing.T, r pistonRun) {
		t.Helper()
		all := r.Stdout + r.Stderr
		if !strings.HasPrefix(r.Stdout, "/mnt/data\n/mnt/data\n/mnt/data/") || !strings.Contains(r.Stderr, `File "/mnt/data/`) {
			t.Fatalf("want /mnt/data as cwd, HOME, argv and in the traceback:\n%s", all)
		}
		for _, leak := range []string{"codellm-runner", "codellm-e2e", "codellm-run-"} {
			if strings.Contains(all, leak) {
				t.Fatalf("host path %q visible inside the sandbox:\n%s", leak, all)
			}
		}
	}
	t.Run("one-off", func(t *testing.T) { check(t, execute(t, base, "python", probe, nil)) })
	t.Run("session", func(t *testing.T) {
		check(t, executeIn(t, base, "neutral-paths-1", "python", probe))
		r := executeIn(t, base, "neutral-paths-1", "bash", "cat /mnt/data/made.txt")
		if r.Stdout != "x" {
			t.Fatalf("a file written to /mnt/data did not persist in the session: %+v", r)
		}
	})
	t.Run("chat block", func(t *testing.T) {
		body := map[string]any{"model": "codellm", "messages": []map[string]string{{"role": "user",
			"content": "```bash\nm=$(grep -c codellm-run /proc/self/mountinfo)\nprintf '{\"answer\":\"%s %s %s\"}' \"$PWD\" \"$FLEET_INPUT\" \"$m\"\n```"}}}
		var resp chatReply
		postJSON(t, base+"/v1/chat/completions", body, &resp)
		got := resp.Choices[0].Message.ToolCalls[0].Function.Arguments
		if got != `{"answer":"/mnt/data /mnt/data/input.json 0"}` {
			t.Fatalf("finish arguments %s", got)
		}
	})
	// The live session's workspace is a tmpfs on the host: SIGTERM must take it along. (SIGKILL leaves it
	// mounted under the work dir, and every later sandbox on the host pays for it; the cleanup's
	// testhelp.RemoveWorkDir then detaches it.)
	if m := testhelp.MountsUnder(t, s.workDir); len(m) == 0 {
		t.Fatal("no workspace tmpfs under the work dir while a session lives: the check below would prove nothing")
	}
	if !s.stop() {
		t.Fatal("serve did not exit on SIGTERM")
	}
	if m := testhelp.MountsUnder(t, s.workDir); len(m) != 0 {
		t.Fatalf("mounts left under the work dir by a SIGTERMed serve: %q", m)
	}
	if entries, _ := os.ReadDir(s.workDir); len(entries) != 0 {
		t.Fatalf("a SIGTERMed serve left %v in its work dir", entries)
	}
}

// The compile stage through the real binary: C is compiled by gcc in the sandbox and workspace (the
// binary lands in /mnt/data's scratch), Piston's "compile" object is reported apart from "run", and a
// compile error skips the run.
func TestCompileStageEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed")
	}
	base := startServe(t)
	type stage struct {
		Stdout, Stderr string
		Code           *int
		Status         *string
	}
	run := func(code string) (c *stage, r stage) {
		var resp struct {
			Compile *stage
			Run     stage
		}
		postJSON(t, base+"/api/v2/execute", map[string]any{"language": "c", "version": "*",
			"files": []map[string]string{{"name": "main.c", "content": code}}}, &resp)
		return resp.Compile, resp.Run
	}
	c, r := run("#include <stdio.h>\n#include <unistd.h>\nint main(void){char b[64]; printf(\"%s\\n\", getcwd(b, sizeof b)); return 3;}\n")
	if c == nil || c.Code == nil || *c.Code != 0 || r.Stdout != "/mnt/data\n" || r.Code == nil || *r.Code != 3 {
		t.Fatalf("compile %+v run %+v, want a clean compile and the program's exit 3 in /mnt/data", c, r)
	}
	c, r = run("int main(void) { return undeclared; }\n")
	if c == nil || c.Code == nil || *c.Code == 0 || !strings.Contains(c.Stderr, "undeclared") || r.Stdout != "" || str(r.Status) != "RE" {
		t.Fatalf("compile %+v run %+v, want the compiler's error and a skipped run", c, r)
	}
}
