package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/testhelp"
	"github.com/codellm/codellm/internal/wire"
)

func TestRegister(t *testing.T) {
	tr := newRunner(t, nil)
	var got []string
	tr.Register(func(method, pattern, name string, h http.HandlerFunc) {
		if h == nil || name == "" {
			t.Errorf("route %s %s registered without handler or name", method, pattern)
		}
		got = append(got, method+" "+pattern)
	})
	want := []string{"POST /api/v2/execute", "GET /api/v2/runtimes", "GET /api/v2/health", "GET /api/v2/connect", "GET /api/v2/packages", "DELETE /api/v2/sessions/"}
	if !slices.Equal(got, want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
}

// TestSessionSerialised: concurrent executes of one session run one after the other, each seeing the
// complete result of the previous one.
func TestSessionSerialised(t *testing.T) {
	tr := newRunner(t, nil)
	const n = 4
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Read-modify-write with a pause in between: interleaving would lose increments.
			_, err := tr.Execute(context.Background(), "ser", code("bash", "c=$(cat count 2>/dev/null || echo 0); sleep 0.1; echo $((c+1)) > count"))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if out := tr.exec("ser", code("bash", "cat count")).Run.Stdout; out != "4\n" {
		t.Fatalf("count = %q, want 4", out)
	}
}

func TestExposedEnv(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.Exposed = []string{"SERVICE_TOKEN=operator-value"} })
	req := code("bash", `echo "$SERVICE_TOKEN"`)
	if out := tr.exec("", req).Run.Stdout; out != "operator-value\n" {
		t.Fatalf("exposed variable: %q", out)
	}
	req.EnvVars = map[string]string{"SERVICE_TOKEN": "from-request"}
	_, err := tr.Execute(context.Background(), "", req)
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "exposed by the operator") {
		t.Fatalf("request overriding an exposed variable: %v", err)
	}
}

// TestSandboxStartFailure: a program that cannot be started is 500 sandbox_execution_failed, and the
// session stays clean because nothing ran.
func TestSandboxStartFailure(t *testing.T) {
	progs, err := interp.Enable(interp.Builtin(), []string{"bash"}, func(string) (string, error) {
		return "/nonexistent/codellm-test/bash", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := newRunner(t, func(c *Config) { c.Programs = progs; c.Versions = map[string]string{"bash": "5.0.0"} })
	status, body, _ := tr.do(http.MethodPost, PathExecute, code("bash", "true"), map[string]string{wire.RuntimeSessionHeader: "sf"})
	if status != 500 || body["error"] != CodeSandboxFailed {
		t.Fatalf("got %d %v", status, body)
	}
	tr.mu.Lock()
	d := tr.sessions["sf"].dirty
	tr.mu.Unlock()
	if d != "" {
		t.Fatalf("session marked dirty although nothing ran: %s", d)
	}
}

// TestWorkRootNotSearchable: under a sandbox that drops privileges, a WorkRoot the sandbox user cannot
// reach is a startup error, not a failure of every execute.
func TestWorkRootNotSearchable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: an unprivileged codellm runs sandboxes as itself")
	}
	sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeBestEffort})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	closed := t.TempDir()
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	progs, _ := interp.Enable(interp.Builtin(), nil, nil)
	_, err = New(Config{Programs: progs, Sandbox: sb, Slots: newPool(1, time.Second), WorkRoot: closed})
	if err == nil || !strings.Contains(err.Error(), "not searchable") {
		t.Fatalf("New with a 0700 WorkRoot: %v", err)
	}
	if entries, _ := os.ReadDir(closed); len(entries) != 0 {
		t.Fatalf("failed New left %d entries in WorkRoot", len(entries))
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parent is 0700 too; only a fully searchable chain is accepted.
	if r2, err := New(Config{Programs: progs, Sandbox: sb, Slots: newPool(1, time.Second), WorkRoot: closed}); err == nil {
		r2.Close()
		if st, _ := os.Stat(filepath.Dir(closed)); st.Mode().Perm()&1 == 0 {
			t.Fatal("New accepted a WorkRoot whose parent is not searchable")
		}
	}
}

// TestWorkspaceSize is differential: writing 2 MB into the workspace succeeds without a quota and fails
// with ENOSPC under a 1 MiB WorkspaceSize, for sessions and one-off runs alike.
func TestWorkspaceSize(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("WorkspaceSize mounts a tmpfs: needs root")
	}
	prog := "head -c 2000000 /dev/zero > big && echo wrote"
	plain := newRunner(t, nil)
	if out := plain.exec("", code("bash", prog)).Run.Stdout; out != "wrote\n" {
		t.Fatalf("without a quota: %q", out)
	}
	tr := newRunner(t, func(c *Config) { c.WorkspaceSize = 1 << 20 })
	for _, sid := range []string{"", "quota"} {
		resp := tr.exec(sid, code("bash", prog))
		if resp.Run.Stdout == "wrote\n" || !strings.Contains(resp.Run.Stderr, "No space left") {
			t.Fatalf("session %q under a 1 MiB quota: %+v", sid, resp.Run)
		}
	}
	// The session still works (the run failed on its own) and its files persist on the tmpfs.
	tr.exec("quota", code("bash", "rm -f big; echo keep > k"))
	if out := tr.exec("quota", code("bash", "cat k")).Run.Stdout; out != "keep\n" {
		t.Fatalf("persistence on the quota tmpfs: %q", out)
	}
	dir := tr.sessions["quota"].dir
	if err := tr.ResetSession("quota"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("quota workspace remains after reset: %v", err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), tr.dir) {
		t.Fatalf("a workspace tmpfs is still mounted under %s", tr.dir)
	}
}

// TestNoProcessSurvives: a daemon started by a run (new session, ignoring SIGHUP) is gone when the
// execute returns. Mode off can only kill the process group; where the sandbox cannot contain the daemon
// the test says so and skips.
func TestNoProcessSurvives(t *testing.T) {
	tr := newRunner(t, nil)
	marker := fmt.Sprintf("%d.%d", 4000+os.Getpid()%1000, time.Now().UnixNano()%1000000)
	tr.exec("daemon", code("bash", "setsid nohup sleep "+marker+" >/dev/null 2>&1 < /dev/null & sleep 0.2; echo started"))
	pids := testhelp.CmdlinePIDs(t, "sleep\x00"+marker)
	if len(pids) == 0 {
		return
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if tr.cfg.Sandbox.Mode() == sandbox.ModeOff {
		native(t) // skip: mode off does not contain a setsid daemon here
	}
	t.Fatalf("processes %v of a finished execute survive", pids)
}

// TestPipeHolderDoesNotHang: a process that escapes the run while holding stdout open cannot hold the
// reply hostage: the execute returns (after the kill grace at most) with what was captured.
func TestPipeHolderDoesNotHang(t *testing.T) {
	tr := newRunner(t, nil)
	marker := fmt.Sprintf("%d.%d", 5000+os.Getpid()%1000, time.Now().UnixNano()%1000000)
	done := make(chan *ExecuteResponse, 1)
	go func() {
		resp, err := tr.Execute(context.Background(), "", code("bash", "echo before; setsid sleep "+marker+" & sleep 0.2"))
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	killDaemon := func() {
		for _, pid := range testhelp.CmdlinePIDs(t, "sleep\x00"+marker) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	defer killDaemon()
	select {
	case resp := <-done:
		if resp != nil && resp.Run.Stdout != "before\n" {
			t.Errorf("stdout %q", resp.Run.Stdout)
		}
	case <-time.After(30 * time.Second): // hang detection only; the bound is the 5 s kill grace
		killDaemon()
		<-done
		t.Fatal("execute was still waiting for a pipe held by an escaped process")
	}
}

// TestExecuteJSON: the in-process JSON entry point answers exactly what the endpoint answers.
func TestExecuteJSON(t *testing.T) {
	tr := newRunner(t, nil)
	status, body := tr.ExecuteJSON(context.Background(), "j", []byte(`{"language":"bash","version":"*","files":[{"content":"echo hi > f; echo out"}]}`))
	var resp ExecuteResponse
	if err := json.Unmarshal(body, &resp); err != nil || status != 200 || resp.Run.Stdout != "out\n" || len(resp.Files) != 1 {
		t.Fatalf("%d %s (%v)", status, body, err)
	}
	status, body = tr.ExecuteJSON(context.Background(), "j", []byte(`{"language":"bash","version":"*","files":[{"content":"cat f"}],"run_timeout":-1}`))
	if status != 400 || !strings.Contains(string(body), `"message":"run_timeout must be non-negative milliseconds (0 means the server's maximum), got -1"`) {
		t.Fatalf("%d %s", status, body)
	}
	status, body = tr.ExecuteJSON(context.Background(), "j", []byte(`{"language":"bash","version":"*","files":[{"content":"cat f"}]}`))
	if status != 200 || !strings.Contains(string(body), `"stdout":"hi\n"`) {
		t.Fatalf("%d %s", status, body)
	}
}

// TestCanceledWhileQueued: a caller that gives up while waiting for a slot leaves its session clean.
func TestCanceledWhileQueued(t *testing.T) {
	tr := newRunner(t, nil)
	tr.exec("q", code("bash", "echo 1 > f"))
	var releases []func()
	for range tr.pool.Size() {
		rel, _, err := tr.pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, rel)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := tr.Execute(ctx, "q", code("bash", "echo 2 > f")); !errors.Is(err, ErrCanceled) {
		t.Fatalf("queued then canceled: %v", err)
	}
	for _, rel := range releases {
		rel()
	}
	if out := tr.exec("q", code("bash", "cat f")).Run.Stdout; out != "1\n" {
		t.Fatalf("after a canceled queued execute: %q", out)
	}
}

func TestExecutionDisabled(t *testing.T) {
	progs, err := interp.Enable(interp.Builtin(), []string{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := newRunner(t, func(c *Config) { c.Programs = progs })
	if n := len(tr.Runtimes()); n != 0 {
		t.Fatalf("%d runtimes listed with execution disabled", n)
	}
	_, err = tr.Execute(context.Background(), "", code("bash", "true"))
	if !errors.Is(err, ErrUnknownRuntime) || !strings.Contains(err.Error(), "execution is disabled") {
		t.Fatalf("%v", err)
	}
}

// TestTTLSparesBusySession: a session is never expired while an execute is using it, however long the
// execute runs; the idle clock starts when it ends.
func TestTTLSparesBusySession(t *testing.T) {
	tr := newRunner(t, func(c *Config) { c.SessionTTL = 200 * time.Millisecond })
	resp := tr.exec("long", code("bash", "echo kept > f; sleep 1; cat f"))
	if resp.Run.Stdout != "kept\n" {
		t.Fatalf("long execute: %+v", resp.Run)
	}
	tr.mu.Lock()
	_, alive := tr.sessions["long"]
	tr.mu.Unlock()
	if !alive {
		t.Fatal("session expired while (or right after) it was busy")
	}
}

func TestDeleteSessionPath(t *testing.T) {
	tr := newRunner(t, nil)
	tr.exec("a/b", code("bash", "true"))
	for _, p := range []string{SessionsPrefix, SessionsPrefix + "x/y", SessionsPrefix + "a%00b"} {
		if status, body, _ := tr.do(http.MethodDelete, p, nil, nil); status != 400 {
			t.Errorf("DELETE %s: %d %v", p, status, body)
		}
	}
	if status, _, _ := tr.do(http.MethodDelete, SessionsPrefix+"a%2Fb", nil, nil); status != 204 || tr.Sessions() != 0 {
		t.Fatalf("DELETE escaped id: %d, %d sessions left", status, tr.Sessions())
	}
}

// TestSweepDeadRunner: the directory of a runner that died without Close (its .lock no longer held) is
// removed by the next runner on the same WorkRoot, with its workspace tmpfs unmounted; a live runner's
// directory and unrelated directories are left alone.
func TestSweepDeadRunner(t *testing.T) {
	root, err := os.MkdirTemp("", "runner-sweep-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	// A dead runner: lock taken and released (as when its process died), a session with a user's file.
	dead := filepath.Join(root, "codellm-runner-dead")
	ws := filepath.Join(dead, "sessions", "abc-1")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "user.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	mounted := false
	if os.Geteuid() == 0 && mountQuota(ws, 1<<20) == nil {
		mounted = true
		if err := os.WriteFile(filepath.Join(ws, "on-tmpfs.txt"), []byte("y"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lf, err := lockDir(dead)
	if err != nil {
		t.Fatal(err)
	}
	lf.Close()
	// Not a runner's: no .lock, or not our prefix.
	unlocked := filepath.Join(root, "codellm-runner-nolock")
	other := filepath.Join(root, "something-else")
	for _, d := range []string{unlocked, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	live := newRunner(t, func(c *Config) { c.WorkRoot = root })
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("dead runner's directory survives: %v", err)
	}
	if mounted {
		if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), dead) {
			t.Fatal("dead runner's workspace tmpfs is still mounted")
		}
	}
	for _, d := range []string{unlocked, other, live.dir} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("%s was removed: %v", d, err)
		}
	}
	// A second runner leaves the first (live) one alone, and the first keeps working.
	second := newRunner(t, func(c *Config) { c.WorkRoot = root })
	if _, err := os.Stat(live.dir); err != nil {
		t.Fatalf("live runner's directory removed by a second runner: %v", err)
	}
	live.exec("s", code("bash", "true"))
	second.exec("s", code("bash", "true"))
}
