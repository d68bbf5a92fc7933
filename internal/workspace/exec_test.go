package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
)

// sandboxUID is the host uid the native sandbox maps its user to when tests run as root.
const sandboxUID = 65534

func offSandbox(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeOff})
	if err != nil {
		t.Fatalf("sandbox off: %v", err)
	}
	return sb
}

var (
	nativeOnce sync.Once
	nativeSB   *sandbox.Sandbox
	nativeErr  error
)

// nativeSandbox returns a native sandbox that has been seen to run a workspace command, or skips the test
// (fails it under CODELLM_REQUIRE_SANDBOX=1).
func nativeSandbox(t *testing.T) *sandbox.Sandbox { return nativeSandboxTB(t) }

func nativeSandboxTB(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	nativeOnce.Do(func() {
		sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeNative, Limits: sandbox.Limits{Memory: 128 << 20}})
		if err != nil {
			nativeErr = err
			return
		}
		dir, err := os.MkdirTemp("", "codellm-ws-probe-")
		if err != nil {
			nativeErr = err
			return
		}
		defer os.RemoveAll(dir)
		os.Chown(dir, sandboxUID, sandboxUID)
		ws, err := Open(dir, Options{AllowCommands: true, AllowWrites: true, Sandbox: sb, HomeDir: "/nonexistent-home"})
		if err != nil {
			nativeErr = err
			return
		}
		defer ws.Close()
		out, err := ws.Do(context.Background(), OpExecuteCommand, json.RawMessage(`{"command":"echo ok > probe && cat probe"}`))
		if err != nil {
			nativeErr = err
			return
		}
		var r ExecuteCommandResult
		if json.Unmarshal(out, &r) != nil || r.Stdout != "ok\n" {
			nativeErr = fmt.Errorf("probe command gave %s", out)
			return
		}
		nativeSB = sb
	})
	if nativeSB == nil {
		msg := fmt.Sprintf("native sandbox unavailable for workspace commands on this host: %v", nativeErr)
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatal(msg + " (CODELLM_REQUIRE_SANDBOX=1)")
		}
		t.Skip(msg + " (set CODELLM_REQUIRE_SANDBOX=1 to make this a failure)")
	}
	return nativeSB
}

// forEachSandbox runs f under the off sandbox (explicitly accepted) and under native when available: the
// behaviour of execute_command itself (limits, exit status, output) must be the same in both.
func forEachSandbox(t *testing.T, f func(t *testing.T, e *testEnv)) {
	t.Run("off", func(t *testing.T) {
		f(t, newEnv(t, Options{AllowCommands: true, AllowWrites: true, Sandbox: offSandbox(t), AllowUnconfinedCommands: true}))
	})
	t.Run("native", func(t *testing.T) {
		sb := nativeSandbox(t)
		e := newEnv(t, Options{AllowCommands: true, AllowWrites: true, Sandbox: sb})
		os.Chown(e.root, sandboxUID, sandboxUID)
		f(t, e)
	})
}

func cmdResult(t *testing.T, m map[string]any) ExecuteCommandResult {
	t.Helper()
	b, _ := json.Marshal(m)
	var r ExecuteCommandResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	// §9.8 invariant: exitCode is null iff timedOut or signal is present.
	if (r.ExitCode == nil) != (r.TimedOut || r.Signal != "") || (r.TimedOut && r.Signal != "") {
		t.Fatalf("exit status invariant broken: %s", b)
	}
	return r
}

func TestCommandsDisabled(t *testing.T) {
	req := `{"command":"true"}`
	newEnv(t, Options{}).fail(OpExecuteCommand, req, CodeCommandDisabled)
	newEnv(t, Options{AllowCommands: true}).fail(OpExecuteCommand, req, CodeCommandDisabled)
	// An off sandbox is refused unless the operator explicitly accepted unconfined commands.
	e := newEnv(t, Options{AllowCommands: true, Sandbox: offSandbox(t)})
	e.fail(OpExecuteCommand, req, CodeCommandDisabled)
	for _, op := range e.ws.Operations() {
		if op == OpExecuteCommand {
			t.Error("execute_command advertised without a usable sandbox")
		}
	}
	e = newEnv(t, Options{AllowCommands: true, Sandbox: offSandbox(t), AllowUnconfinedCommands: true})
	if ops := e.ws.Operations(); ops[len(ops)-1] != OpExecuteCommand {
		t.Errorf("execute_command not advertised: %v", ops)
	}
	// A sandbox with network access is refused.
	netSB, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeOff, Network: true})
	if err != nil {
		t.Fatal(err)
	}
	newEnv(t, Options{AllowCommands: true, Sandbox: netSB, AllowUnconfinedCommands: true}).fail(OpExecuteCommand, req, CodeCommandDisabled)
}

func TestCommandRequestLimits(t *testing.T) {
	e := newEnv(t, Options{AllowCommands: true, Sandbox: offSandbox(t), AllowUnconfinedCommands: true})
	e.write("file.txt", "x")
	os.Mkdir(filepath.Join(e.root, "sub"), 0o755)
	e.symlink("sub", "sublink")
	e.symlink(e.outside, "outlink")
	for _, req := range []string{
		`{"command":""}`, `{"command":"  \n\t"}`, `{"command":"echo \u0000"}`,
		js(map[string]any{"command": "#" + strings.Repeat("x", 32<<10)}),
		`{"command":"true","timeoutMs":0}`, `{"command":"true","timeoutMs":300001}`,
		`{"command":"true","maxOutputBytes":0}`, `{"command":"true","maxOutputBytes":1048577}`,
		`{"command":"true","stdin":"x"}`,
	} {
		e.fail(OpExecuteCommand, req, CodeInvalidRequest)
	}
	for _, cwd := range []string{"missing", "file.txt", "sublink", "outlink", "../outside", "/tmp"} {
		e.fail(OpExecuteCommand, js(map[string]any{"command": "true", "cwd": cwd}), CodeInvalidPath)
	}
	// At the limits.
	r := cmdResult(t, e.ok(OpExecuteCommand, js(map[string]any{"command": "#" + strings.Repeat("x", 32<<10-1), "timeoutMs": 300000, "maxOutputBytes": 1048576})))
	if r.ExitCode == nil || *r.ExitCode != 0 {
		t.Errorf("32 KiB command: %+v", r)
	}
	r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"pwd","cwd":"./sub/","timeoutMs":1}`))
	if !r.TimedOut && !strings.HasSuffix(r.Stdout, "/sub\n") {
		t.Errorf("cwd: %+v", r)
	}
}

func TestCommandExitStatus(t *testing.T) {
	forEachSandbox(t, func(t *testing.T, e *testEnv) {
		e.write("sub/in.txt", "from sub\n")
		r := cmdResult(t, e.ok(OpExecuteCommand, `{"command":"echo out; echo err >&2; exit 3"}`))
		if *r.ExitCode != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" || r.Truncated || r.TimedOut {
			t.Errorf("exit 3: %+v", r)
		}
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"exit 255"}`))
		if *r.ExitCode != 255 {
			t.Errorf("exit 255: %+v", r)
		}
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"cat in.txt; pwd","cwd":"sub"}`))
		if *r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "from sub\n") || !strings.HasSuffix(r.Stdout, "/sub\n") {
			t.Errorf("cwd sub: %+v", r)
		}
		// stdin is /dev/null: a read sees EOF at once.
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"cat; echo done"}`))
		if r.Stdout != "done\n" {
			t.Errorf("stdin: %+v", r)
		}
		// Writes inside the root persist.
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"echo made > made.txt"}`))
		if *r.ExitCode != 0 || e.read("made.txt") != "made\n" {
			t.Errorf("write inside the root: %+v", r)
		}
		// The environment is reduced to the documented variables.
		os.Setenv("CODELLM_WS_TEST_SECRET", "leak")
		os.Setenv("LIBRECHAT_CODE_TEST_SECRET", "leak")
		defer os.Unsetenv("CODELLM_WS_TEST_SECRET")
		defer os.Unsetenv("LIBRECHAT_CODE_TEST_SECRET")
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"env -0"}`))
		allowed := map[string]bool{"COLORTERM": true, "HOME": true, "LANG": true, "LOGNAME": true, "NO_COLOR": true,
			"PATH": true, "SHELL": true, "TERM": true, "TMPDIR": true, "USER": true,
			"PWD": true, "SHLVL": true, "_": true, "OLDPWD": true} // the last four are set by bash itself
		for _, kv := range strings.Split(strings.TrimSuffix(r.Stdout, "\x00"), "\x00") {
			k, _, _ := strings.Cut(kv, "=")
			if !allowed[k] && !strings.HasPrefix(k, "LC_") {
				t.Errorf("unexpected environment variable %q", kv)
			}
		}
		// TMPDIR is private, owner-only and usable; HOME is not the user's home.
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"test -d \"$TMPDIR\" && stat -c %a \"$TMPDIR\" && mktemp >/dev/null && echo ok; echo \"$HOME\""}`))
		home, _ := os.UserHomeDir()
		if !strings.HasPrefix(r.Stdout, "700\nok\n") || strings.Contains(r.Stdout, home+"\n") && home != "/tmp" {
			t.Errorf("TMPDIR/HOME: %+v", r)
		}
	})
}

func TestCommandSignal(t *testing.T) {
	// In off mode a command can kill itself; in native mode the shell is PID 1 of its namespace and ignores
	// signals from inside, so the signal comes from the memory limit (the kernel's SIGKILL).
	t.Run("off", func(t *testing.T) {
		e := newEnv(t, Options{AllowCommands: true, Sandbox: offSandbox(t), AllowUnconfinedCommands: true})
		r := cmdResult(t, e.ok(OpExecuteCommand, `{"command":"kill -TERM $$"}`))
		if r.Signal != "SIGTERM" || r.ExitCode != nil || r.TimedOut {
			t.Errorf("SIGTERM: %+v", r)
		}
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"kill -KILL $$"}`))
		if r.Signal != "SIGKILL" {
			t.Errorf("SIGKILL: %+v", r)
		}
	})
	t.Run("native", func(t *testing.T) {
		sb := nativeSandbox(t)
		e := newEnv(t, Options{AllowCommands: true, Sandbox: sb})
		os.Chown(e.root, sandboxUID, sandboxUID)
		r := cmdResult(t, e.ok(OpExecuteCommand, `{"command":"x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo survived","timeoutMs":60000}`))
		if r.Signal != "SIGKILL" || r.TimedOut || r.Stdout != "" {
			t.Errorf("memory limit kill: %+v", r)
		}
	})
}

func TestCommandTimeoutAndCleanup(t *testing.T) {
	forEachSandbox(t, func(t *testing.T, e *testEnv) {
		marker := fmt.Sprintf("%d%06d", os.Getpid(), time.Now().UnixNano()%1000000)
		// A daemonised grandchild that would outlive the command, and a foreground sleep that hits the timeout.
		cmd := fmt.Sprintf("(setsid sleep 1000.%s &) ; echo started; sleep 1000.%s", marker, marker)
		r := cmdResult(t, e.ok(OpExecuteCommand, js(map[string]any{"command": cmd, "timeoutMs": 2000})))
		if !r.TimedOut || r.ExitCode != nil || r.Signal != "" || r.Stdout != "started\n" {
			t.Errorf("timeout: %+v", r)
		}
		// Nothing the command started may survive; native mode guarantees it (PID namespace), off mode can only
		// kill the process group, so there the setsid'd grandchild is an accepted leak we clean up ourselves.
		leaked := findProcs("sleep 1000." + marker)
		if e.ws.opts.Sandbox.Mode() == sandbox.ModeNative && len(leaked) > 0 {
			t.Errorf("processes survived the command: %v", leaked)
		}
		for _, pid := range leaked {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
		// Normal completion also kills leftovers (native).
		cmd = fmt.Sprintf("(sleep 1001.%s &) ; echo bg", marker)
		r = cmdResult(t, e.ok(OpExecuteCommand, js(map[string]any{"command": cmd})))
		if *r.ExitCode != 0 {
			t.Errorf("background: %+v", r)
		}
		if left := findProcs("sleep 1001." + marker); len(left) > 0 {
			t.Errorf("background child survived completion: %v", left)
		}
	})
}

// findProcs lists pids whose command line contains s.
func findProcs(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestCommandOutputBudget(t *testing.T) {
	forEachSandbox(t, func(t *testing.T, e *testEnv) {
		r := cmdResult(t, e.ok(OpExecuteCommand, `{"command":"printf 1234567890","maxOutputBytes":10}`))
		if r.Stdout != "1234567890" || r.Truncated {
			t.Errorf("exactly the budget: %+v", r)
		}
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"printf 12345678901","maxOutputBytes":10}`))
		if r.Stdout != "1234567890" || !r.Truncated {
			t.Errorf("one byte over: %+v", r)
		}
		// One budget for both streams.
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"printf aaaa; printf bbbb >&2","maxOutputBytes":6}`))
		if len(r.Stdout)+len(r.Stderr) != 6 || !r.Truncated {
			t.Errorf("shared budget: %+v", r)
		}
		// Cut on a UTF-8 boundary: 2-byte characters into an odd budget.
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"printf 'ééé'","maxOutputBytes":5}`))
		if r.Stdout != "éé" || !r.Truncated {
			t.Errorf("UTF-8 cut: %q %+v", r.Stdout, r)
		}
		// A flood: bounded output, the command ends (here by its timeout) and the result is valid.
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"yes | head -c 5000000; echo end >&2","maxOutputBytes":1000}`))
		if len(r.Stdout)+len(r.Stderr) != 1000 || !r.Truncated || *r.ExitCode != 0 {
			t.Errorf("flood: %d bytes %+v", len(r.Stdout), r.Truncated)
		}
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"yes","timeoutMs":1000,"maxOutputBytes":1000}`))
		if len(r.Stdout) > 1000 || !r.TimedOut {
			t.Errorf("endless flood: %d bytes %+v", len(r.Stdout), r.TimedOut)
		}
		r = cmdResult(t, e.ok(OpExecuteCommand, `{"command":"head -c 3000000 /dev/zero | tr '\\0' x"}`))
		if len(r.Stdout) != 262144 || !r.Truncated || *r.ExitCode != 0 {
			t.Errorf("default budget: %d bytes %+v", len(r.Stdout), r.Truncated)
		}
		// Invalid UTF-8 and NUL in output still give valid JSON.
		out, err := e.ws.Do(context.Background(), OpExecuteCommand, json.RawMessage(`{"command":"printf '\\xff\\x00ok'"}`))
		if err != nil || !json.Valid(out) {
			t.Errorf("binary output: %s %v", out, err)
		}
	})
}

func TestCommandOneAtATimeAndAbort(t *testing.T) {
	forEachSandbox(t, func(t *testing.T, e *testEnv) {
		// Two concurrent commands that would collide on a lock directory if they overlapped.
		var wg sync.WaitGroup
		results := make([]ExecuteCommandResult, 2)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := e.ws.Do(context.Background(), OpExecuteCommand, json.RawMessage(`{"command":"mkdir lock && sleep 0.3 && rmdir lock"}`))
				if err == nil {
					json.Unmarshal(out, &results[i])
				}
			}()
		}
		wg.Wait()
		for i, r := range results {
			if r.ExitCode == nil || *r.ExitCode != 0 {
				t.Errorf("command %d overlapped with the other: %+v", i, r)
			}
		}
		// Cancellation kills the command and reports EXECUTION_ABORTED, may have committed.
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		_, err := e.ws.Do(ctx, OpExecuteCommand, json.RawMessage(`{"command":"sleep 1002"}`))
		var we *Error
		if !errors.As(err, &we) || we.Code != CodeExecutionAborted || !we.MayHaveCommitted {
			t.Errorf("cancel: %v", err)
		}
		if left := findProcs("sleep 1002"); len(left) > 0 {
			t.Errorf("cancelled command survived: %v", left)
		}
	})
}

// TestCommandConfinement is differential: each probe succeeds under the off sandbox and fails under native.
func TestCommandConfinement(t *testing.T) {
	sb := nativeSandbox(t)
	home, err := os.UserHomeDir()
	if err != nil {
		t.Skip("no home directory")
	}
	secret := filepath.Join(home, fmt.Sprintf(".codellm-ws-test-%d", os.Getpid()))
	if err := os.WriteFile(secret, []byte("HOME SECRET"), 0o644); err != nil {
		t.Skipf("cannot plant a file in the home directory: %v", err)
	}
	defer os.Remove(secret)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HELLO\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	type probe struct {
		name, cmd, proof string
		needsRoot        bool // the probe only works unsandboxed when the tests run as root
	}
	run := func(e *testEnv, p probe) ExecuteCommandResult {
		return cmdResult(t, e.ok(OpExecuteCommand, js(map[string]any{"command": p.cmd, "timeoutMs": 10000})))
	}
	for _, mode := range []string{"off", "native"} {
		var e *testEnv
		if mode == "off" {
			e = newEnv(t, Options{AllowCommands: true, Sandbox: offSandbox(t), AllowUnconfinedCommands: true})
		} else {
			e = newEnv(t, Options{AllowCommands: true, Sandbox: sb})
			os.Chown(e.root, sandboxUID, sandboxUID)
		}
		outsideFile := filepath.Join(e.outside, "pwned-"+mode)
		hostFile := fmt.Sprintf("/usr/local/codellm-ws-probe-%d-%s", os.Getpid(), mode)
		defer os.Remove(hostFile)
		probes := []probe{
			{"write outside the root", "echo x > " + outsideFile + " && echo WROTE", "WROTE", false},
			{"write to a host directory visible read-only", "echo x > " + hostFile + " && echo WROTE", "WROTE", true},
			{"read /etc/shadow", "head -c 5 /etc/shadow >/dev/null && echo READ", "READ", true},
			{"read the home directory", "cat " + secret, "HOME SECRET", false},
			{"read outside the root", "cat " + filepath.Join(e.outside, "secret.txt"), "TOP SECRET", false},
			{"network to host loopback", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -n1 <&3", port), "HELLO", false},
		}
		for _, p := range probes {
			if p.needsRoot && os.Geteuid() != 0 {
				continue
			}
			r := run(e, p)
			reached := strings.Contains(r.Stdout, p.proof)
			if mode == "off" && !reached {
				t.Errorf("%s: the probe does not work even without the sandbox: %+v", p.name, r)
			}
			if mode == "native" && reached {
				t.Errorf("%s: the native sandbox let the probe through: %+v", p.name, r)
			}
		}
		for _, f := range []string{outsideFile, hostFile} {
			if _, err := os.Stat(f); mode == "native" && err == nil {
				t.Errorf("native: %s appeared outside the root", f)
			}
		}
	}
}

func TestScrub(t *testing.T) {
	e := newEnv(t, Options{HomeDir: "/home/someone"})
	msg := e.ws.scrub("bind " + e.ws.real + "/x: denied; home /home/someone/.config")
	if strings.Contains(msg, e.base) || strings.Contains(msg, "/home/someone") {
		t.Errorf("host path in %q", msg)
	}
}

func TestCommandFailures(t *testing.T) {
	defer func() { writeHook = nil }()
	e := newEnv(t, Options{AllowCommands: true, Sandbox: offSandbox(t), AllowUnconfinedCommands: true})
	// The sandbox cannot start the command (its workdir vanished after the checks): COMMAND_UNAVAILABLE,
	// atomic because nothing ran.
	writeHook = func(step string) {
		if step == "command-start" {
			os.Rename(e.root, e.root+".gone")
		}
	}
	we := e.fail(OpExecuteCommand, `{"command":"true"}`, CodeCommandUnavailable)
	if we.MayHaveCommitted {
		t.Errorf("a command that never started cannot have committed")
	}
	writeHook = nil
	os.Rename(e.root+".gone", e.root)

	// The process tree is not confirmed reaped within the grace after the timeout: COMMAND_TIMEOUT, may have
	// committed. The sandbox's confirmation is withheld until the call has answered, so the outcome does not
	// depend on how fast the killed command dies. The 20 s fallback only keeps a broken implementation (one that
	// waits for the confirmation whatever the grace) from hanging: it then answers with a result and fails here.
	marker := fmt.Sprintf("1003.%d%06d", os.Getpid(), time.Now().UnixNano()%1000000)
	release, confirmed := make(chan struct{}), make(chan struct{})
	savedGrace, savedWait := reapGrace, waitReaped
	restore := func() { reapGrace, waitReaped = savedGrace, savedWait }
	defer restore()
	reapGrace = 100 * time.Millisecond
	waitReaped = func(p *sandbox.Process) sandbox.Result {
		defer close(confirmed)
		r := p.Wait()
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		return r
	}
	start := time.Now()
	we = e.fail(OpExecuteCommand, js(map[string]any{"command": "sleep " + marker, "timeoutMs": 50}), CodeCommandTimeout)
	if !we.MayHaveCommitted {
		t.Errorf("COMMAND_TIMEOUT must be may-have-committed")
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("COMMAND_TIMEOUT took %v: the grace was not applied", d)
	}
	close(release)
	select {
	case <-confirmed:
	case <-time.After(10 * time.Second):
		t.Fatal("the command was never reaped after COMMAND_TIMEOUT")
	}
	restore()
	// The background cleanup still kills it, and gives the command slot back once it is done.
	deadline := time.Now().Add(10 * time.Second)
	for len(findProcs("sleep "+marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("command not cleaned up after COMMAND_TIMEOUT")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.ws.ExecuteCommand(ctx, &ExecuteCommandRequest{Command: "true"}); err != nil {
		t.Errorf("a command after COMMAND_TIMEOUT's cleanup: %v", err)
	}
}
