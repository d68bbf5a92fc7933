package examples

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/testhelp"
)

// notRun are the examples this test does not run, by document and the start of the command, with the
// reason. Every other shell example of the README and docs/ runs; a new one that cannot must be added here.
var notRun = map[string]string{
	"README.md: make test":                              "the whole suite, of which this test is a part",
	"README.md: cd dist && sha256sum":                   "needs make release's dist/ (make release checks its binaries and sums itself: .ci/check-release)",
	"README.md: sudo install":                           "writes /usr/local/bin",
	"docs/operator.md: systemd-run --pty":               "needs systemd as PID 1 and a terminal (deploy's tests check the unit files)",
	"docs/operator.md: CGO_ENABLED=0 go build -o /tmp/": "writes /tmp/codellm and imports an image into the machine's podman store (internal/worker's docker tests build the same image)",
	"docs/operator.md: deploy/container/rootfs.sh":      "part of the image build above",
	"docs/operator.md: podman import":                   "part of the image build above",
	"docs/debugger.md: codellm debug role.md":           "interactive, with timings in its output (internal/debugger's terminal tests drive it)",
}

// daemons are the commands that serve until stopped: the test starts them in the background and goes on
// once they print the line that says they are ready. `make serve` is `make build` (done: bin/codellm is
// this test's build) and then bin/codellm serve.
var daemons = []struct {
	re    *regexp.Regexp
	ready string
}{
	{regexp.MustCompile(`^(bin/)?codellm serve\b`), "codellm serving"},
	{regexp.MustCompile(`^make serve\b`), "codellm serving"},
	{regexp.MustCompile(`^codellm hub( serve)?( -|$)`), "listening on"},
	{regexp.MustCompile(`^codellm worker run\b`), "registered incarnation"},
}

// ports are the documents' fixed ports; each document's session gets free ones in their place, so that the
// test runs beside anything else on the machine.
var ports = []string{"8080", "8090", "9091"}

// Every shell example of the README and the guides, as printed, against real codellm processes: the
// commands of one document run in order in one shell session (variables carry over), in a directory laid
// out like the repository after `make build`; a command must exit 0, and where the document shows its
// output, print that ("…" standing for anything).
func TestDocumentExamples(t *testing.T) {
	requireNative(t)
	root := bin(t)
	var docs []string
	for _, pat := range []string{"../*.md", "../docs/*.md", "../internal/*/README.md"} {
		m, _ := filepath.Glob(pat)
		docs = append(docs, m...)
	}
	sort.Strings(docs)
	ran := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(doc, "../")
		cmds := examples(rel, string(text))
		if len(cmds) == 0 {
			continue
		}
		t.Run(rel, func(t *testing.T) { ran += newSession(t, root, rel).runAll(cmds) })
	}
	if ran < 20 {
		t.Fatalf("ran %d examples: is the extraction finding the documents' blocks?", ran)
	}
}

// skipReason is why c is not run ("" when it is).
func skipReason(c command) string {
	for k, why := range notRun {
		file, prefix, _ := strings.Cut(k, ": ")
		if c.file == file && strings.HasPrefix(c.text, prefix) {
			return why
		}
	}
	if c.file == "BENCHMARKS.md" {
		return "benchmarks take minutes of the whole machine (make bench)"
	}
	return ""
}

// session is one document's shell session: its directory, environment, ports and background processes.
type session struct {
	t       *testing.T
	dir     string
	state   string // the exported variables, carried from one command to the next
	port    map[string]string
	env     []string
	daemons map[string]*daemon
}

func newSession(t *testing.T, root, doc string) *session {
	dir := testhelp.NewWorkDir(t, "codellm-examples-session-") // searchable by the sandbox's user (package sets live here)
	s := &session{t: t, dir: dir, state: filepath.Join(dir, ".state"), port: map[string]string{}, daemons: map[string]*daemon{}}
	must(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(t, os.Symlink(filepath.Join(root, "codellm"), filepath.Join(dir, "bin", "codellm")))
	must(t, exec.Command("cp", "-r", "../examples", filepath.Join(dir, "examples")).Run())
	home := filepath.Join(dir, "home")
	for _, d := range []string{"project", "projects/site"} {
		must(t, os.MkdirAll(filepath.Join(home, d), 0o755))
	}
	// An HTTP error is a failed example: curl exits non-zero on a status of 400 or more (and still prints).
	must(t, os.WriteFile(filepath.Join(home, ".curlrc"), []byte("fail-with-body\n"), 0o644))
	for _, p := range ports {
		s.port[p] = testhelp.FreePort(t)
	}
	s.env = append(os.Environ(), "HOME="+home, "PATH="+root+":"+os.Getenv("PATH"),
		// What the documents ask the reader to have: the hub's credentials, a token to seal and a seal key.
		"ADMIN="+secret(t), "KEY="+secret(t), "TOKEN=ghp_example", "SEAL_KEY="+secret(t)[:32],
		// serve's default address, moved to this session's port as the commands' 8080 is.
		"CODELLM_LISTEN=127.0.0.1:"+s.port["8080"], "CODELLM_WORK_DIR="+testhelp.NewWorkDir(t, "codellm-examples-"))
	s.env = append(s.env, documentEnv(t, s, doc)...)
	t.Cleanup(s.stop)
	return s
}

// runAll runs the commands in order and returns how many ran.
func (s *session) runAll(cmds []command) int {
	n := 0
	for _, c := range cmds {
		if why := skipReason(c); why != "" {
			s.t.Logf("%s:%d not run (%s): %s", c.file, c.line, why, c.text)
			continue
		}
		text := s.ports(c.text)
		s.t.Logf("%s:%d: %s", c.file, c.line, firstLine(text))
		if re, ready := daemonOf(text); re != nil {
			s.start(c, text, ready)
		} else {
			s.run(c, text)
		}
		n++
	}
	return n
}

// ports moves the document's fixed ports to the session's.
func (s *session) ports(text string) string {
	for _, p := range ports {
		text = regexp.MustCompile(`:`+p+`\b`).ReplaceAllString(text, ":"+s.port[p])
	}
	return text
}

func daemonOf(text string) (*regexp.Regexp, string) {
	for _, d := range daemons {
		if d.re.MatchString(text) {
			return d.re, d.ready
		}
	}
	return nil, ""
}

// script is the bash script of one command: the session's variables in, the command, its variables out.
func (s *session) script(text string) string {
	return fmt.Sprintf("set -a\n[ -f %[1]q ] && . %[1]q\n%[2]s\n__rc=$?\nexport -p > %[1]q\nexit $__rc\n", s.state, text)
}

// run runs one command to its end and checks its exit status and the output the document shows.
func (s *session) run(c command, text string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", s.script(text))
	cmd.Dir, cmd.Env = s.dir, s.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		s.t.Errorf("%s:%d: %v\n%s\nstdout:\n%s\nstderr:\n%s%s", c.file, c.line, err, c.text, stdout.String(), stderr.String(), s.daemonLogs())
		return
	}
	if c.want != "" && !matches(c, stdout.String()) {
		s.t.Errorf("%s:%d: %s\nprints:\n%s\nthe document shows:\n%s", c.file, c.line, c.text, stdout.String(), c.want)
	}
}

// daemon is a command that serves in the background.
type daemon struct {
	cmd *exec.Cmd
	out *testhelp.SyncBuffer
}

// start starts a serving command and waits for its ready line; a later daemon of the same command (and
// worker ID) replaces it, as a reader would stop the first before starting the second.
func (s *session) start(c command, text, ready string) {
	key := daemonKey(text)
	if old := s.daemons[key]; old != nil {
		old.stop()
	}
	text = strings.TrimSuffix(strings.TrimSpace(text), "&")
	text = strings.Replace(text, "make serve", "bin/codellm serve", 1)
	d := &daemon{cmd: exec.Command("bash", "-c", s.script(text)), out: &testhelp.SyncBuffer{}}
	d.cmd.Dir, d.cmd.Env = s.dir, s.env
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(s.t, d.cmd.Start())
	s.daemons[key] = d
	exited := make(chan struct{})
	go func() { d.cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(2 * time.Minute); !strings.Contains(d.out.String(), ready); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			s.t.Fatalf("%s:%d: %s exited before it was ready:\n%s", c.file, c.line, c.text, d.out.String())
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s:%d: %s not ready after 2 minutes:\n%s", c.file, c.line, c.text, d.out.String())
		}
	}
}

// daemonKey names what a daemon serves: its first two words, and the worker ID of a worker.
func daemonKey(text string) string {
	f := strings.Fields(text)
	key := strings.Join(f[:min(2, len(f))], " ")
	for i, w := range f {
		if w == "--worker-id" && i+1 < len(f) {
			key += " " + f[i+1]
		}
	}
	return key
}

func (d *daemon) stop() {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	for i := 0; i < 200 && d.cmd.ProcessState == nil; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
}

// stop ends the session's daemons, workers first (they drain against the hub).
func (s *session) stop() {
	keys := make([]string, 0, len(s.daemons))
	for k := range s.daemons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return strings.Contains(keys[i], "worker") && !strings.Contains(keys[j], "worker")
	})
	for _, k := range keys {
		s.daemons[k].stop()
	}
}

func (s *session) daemonLogs() string {
	var b strings.Builder
	for k, d := range s.daemons {
		fmt.Fprintf(&b, "\n--- %s:\n%s", k, d.out.String())
	}
	return b.String()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func secret(t *testing.T) string {
	b := make([]byte, 24)
	_, err := rand.Read(b)
	must(t, err)
	return hex.EncodeToString(b)
}

// requireNative skips where the host cannot run the native sandbox the examples use (a failure under
// CODELLM_REQUIRE_SANDBOX=1).
func requireNative(t *testing.T) {
	if rep := sandbox.Probe(sandbox.Config{Mode: sandbox.ModeNative}); !rep.Ready {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("native sandbox unavailable (missing %v) and CODELLM_REQUIRE_SANDBOX=1", rep.Missing)
		}
		t.Skipf("native sandbox unavailable here (missing %v)", rep.Missing)
	}
}
