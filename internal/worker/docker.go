package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/wire"
)

// Container supervisor constants (§11.4).
const (
	containerRunner    = "http://127.0.0.1:2000/api/v2"
	maxCLIOutput       = 64 << 20
	maxCLIStderr       = 64 << 10
	defaultHealthWait  = 30 * time.Second
	healthPollInterval = 100 * time.Millisecond
)

// NSJailCaps are the capabilities the docker-nsjail container gets (§11.4).
var NSJailCaps = []string{"SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE", "SETUID", "SETGID", "NET_ADMIN", "DAC_OVERRIDE",
	"DAC_READ_SEARCH", "CHOWN", "FOWNER", "FSETID", "KILL", "SETFCAP", "MKNOD"}

// DockerConfig configures the docker and docker-nsjail supervisors.
type DockerConfig struct {
	CLI            string   // docker-compatible CLI, run without a shell (default "docker"; podman works)
	Image          string   // CODELLM_RUNTIME_IMAGE (required)
	NSJail         bool     // the docker-nsjail variant
	SeccompProfile string   // CODELLM_DOCKER_SECCOMP_PROFILE: absolute path (required for nsjail)
	PackagesPath   string   // CODELLM_DOCKER_PACKAGES_PATH: mounted read-only at /pkgs (required for nsjail)
	Env            []string // extra K=V for every container (e.g. CODELLM_SANDBOX=besteffort)
	HealthWait     time.Duration
	// Memory (bytes, swap included) and Pids bound each container: its runner and the runs it serves.
	// Both are required: inside a container the runner's own sandbox has no cgroups to bound a run, and
	// unbounded containers let one run take 1.5 GiB and 600 processes (issue 35 item 3).
	Memory int64
	Pids   int
	// Sessions bounds the session containers (see DockerSessions); zero values take its defaults.
	Sessions DockerSessions
	// Owner, when set (the worker ID), labels every container this supervisor makes
	// (io.codellm.worker), so that a new supervisor of the same owner finds what an earlier one left:
	// stateless containers a crash left behind are removed, session containers are adopted.
	Owner string
}

// Docker owns one named container per runtime session and reaches the runner inside it with
// `docker exec … curl` (§11.4): the container has no network and publishes no port.
type Docker struct {
	cfg     DockerConfig
	imageID string
	seccomp []byte
	runSpec
	stateless runSpec // runSpec labelled io.codellm.stateless, for assignment-<id> containers

	mu    sync.Mutex
	locks map[string]*sessionLock
	live  map[string]*liveContainer // session containers, by name (docker_sessions.go)

	stopJanitor chan struct{}
	janitorDone chan struct{}
}

// runSpec is one kind of container: its docker run arguments and the profile label they hash to.
type runSpec struct {
	args    []string // the docker run arguments after the name, up to and including the image
	profile string
}

type sessionLock struct {
	mu   sync.Mutex
	refs int
}

// NewDocker validates cfg, resolves the image to its ID with the CLI and computes the runtime profile.
func NewDocker(ctx context.Context, cfg DockerConfig) (*Docker, error) {
	if cfg.CLI == "" {
		cfg.CLI = "docker"
	}
	if cfg.HealthWait <= 0 {
		cfg.HealthWait = defaultHealthWait
	}
	if cfg.Image == "" {
		return nil, fmt.Errorf("%w: the docker supervisors need CODELLM_RUNTIME_IMAGE", ErrConfig)
	}
	for _, kv := range cfg.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsAny(kv, "\r\n\x00") {
			return nil, fmt.Errorf("%w: container environment entry %q is not K=V", ErrConfig, kv)
		}
	}
	var seccomp []byte
	if cfg.SeccompProfile != "" || cfg.NSJail {
		if !filepath.IsAbs(cfg.SeccompProfile) {
			return nil, fmt.Errorf("%w: CODELLM_DOCKER_SECCOMP_PROFILE must be an absolute path (required for docker-nsjail), got %q", ErrConfig, cfg.SeccompProfile)
		}
		b, err := os.ReadFile(cfg.SeccompProfile)
		if err != nil {
			return nil, fmt.Errorf("%w: seccomp profile: %v", ErrConfig, err)
		}
		seccomp = b
	}
	if cfg.NSJail {
		if st, err := os.Stat(cfg.PackagesPath); !filepath.IsAbs(cfg.PackagesPath) || err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%w: docker-nsjail needs CODELLM_DOCKER_PACKAGES_PATH, an absolute directory (got %q)", ErrConfig, cfg.PackagesPath)
		}
	}
	if cfg.Memory <= 0 || cfg.Pids <= 0 {
		return nil, fmt.Errorf("%w: the docker supervisors need a memory and a pids limit per container (--container-memory-limit, --container-pids-limit), got %d bytes and %d", ErrConfig, cfg.Memory, cfg.Pids)
	}
	cfg.Sessions = cfg.Sessions.withDefaults()
	d := &Docker{cfg: cfg, seccomp: seccomp, locks: map[string]*sessionLock{}, live: map[string]*liveContainer{}}
	out, err := d.cli(ctx, nil, "image", "inspect", "--format", "{{.Id}}", cfg.Image)
	if err != nil {
		return nil, fmt.Errorf("%w: runtime image %q: %v", ErrConfig, cfg.Image, err)
	}
	d.imageID = strings.TrimSpace(string(out))
	d.runSpec = d.runArgs(nil, nil, "")
	d.stateless = d.runSpec.withLabel(labelStateless + "=true")
	if err := d.adopt(ctx); err != nil {
		return nil, fmt.Errorf("%w: runtime containers left by an earlier worker: %v", ErrConfig, err)
	}
	d.startJanitor()
	return d, nil
}

// runArgs builds the fixed part of `docker run` and the profile: the sha256 of everything that shapes a
// container (image ID, capabilities, seccomp bytes, mounts, environment, user). extraMounts, extraEnv and
// user are the runtime command sandbox's (docker_workspace.go).
func (d *Docker) runArgs(extraMounts, extraEnv []string, user string) runSpec {
	var caps, mounts, env []string
	env = append(env, "SANDBOX_SESSION_WORKSPACE_ENABLED=true")
	if d.cfg.NSJail {
		caps = NSJailCaps
		mounts = append(mounts, "type=bind,src="+d.cfg.PackagesPath+",dst=/pkgs,readonly")
		env = append(env, "SANDBOX_USE_CGROUPV2=false", "SANDBOX_REMOVE_UMOUNT_AFTER_STARTUP=false")
	}
	mounts = append(mounts, extraMounts...)
	// The runner inside applies the same limits to each run where it can (its own cgroups).
	env = append(env, "CODELLM_MEMORY_LIMIT="+strconv.FormatInt(d.runMemory(), 10), "CODELLM_PIDS_LIMIT="+strconv.Itoa(d.runPids()))
	env = append(append(env, d.cfg.Env...), extraEnv...)
	seccomp := d.seccomp
	h := sha256.New()
	fmt.Fprintf(h, "image\x00%s\x00caps\x00%s\x00seccomp\x00%d\x00", d.imageID, strings.Join(caps, ","), len(seccomp))
	h.Write(seccomp)
	fmt.Fprintf(h, "\x00mounts\x00%s\x00env\x00%s", strings.Join(mounts, "\x00"), strings.Join(env, "\x00"))
	fmt.Fprintf(h, "\x00limits\x00%d\x00%d", d.cfg.Memory, d.cfg.Pids)
	if user != "" {
		fmt.Fprintf(h, "\x00user\x00%s", user)
	}
	profile := hex.EncodeToString(h.Sum(nil))

	mem := strconv.FormatInt(d.cfg.Memory, 10)
	a := []string{"--network", "none", "--cap-drop", "ALL", "--memory", mem, "--memory-swap", mem, "--pids-limit", strconv.Itoa(d.cfg.Pids)}
	for _, c := range caps {
		a = append(a, "--cap-add", c)
	}
	a = append(a, "--security-opt", "no-new-privileges:true")
	if seccomp != nil {
		a = append(a, "--security-opt", "seccomp="+d.cfg.SeccompProfile)
	}
	for _, m := range mounts {
		a = append(a, "--mount", m)
	}
	a = append(a, "--label", "io.codellm.runtime=true", "--label", "io.codellm.runtime-profile="+profile)
	if d.cfg.Owner != "" {
		a = append(a, "--label", labelOwner+"="+d.cfg.Owner)
	}
	for _, e := range env {
		a = append(a, "--env", e)
	}
	if user != "" {
		a = append(a, "--user", user)
	}
	return runSpec{args: append(a, d.cfg.Image), profile: profile}
}

// withLabel is sp with one more --label (not part of the profile: a label shapes nothing inside).
func (sp runSpec) withLabel(label string) runSpec {
	n := len(sp.args) - 1 // the image is last
	args := append(append(slices.Clone(sp.args[:n]), "--label", label), sp.args[n])
	return runSpec{args: args, profile: sp.profile}
}

// ContainerName is codellm-<H(sessionId)[:24]>.
func ContainerName(sessionID string) string { return "codellm-" + sessionHash(sessionID) }

func sessionHash(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(sum[:])[:24]
}

func (d *Docker) Stateful() bool { return true }
func (d *Docker) Label() string {
	if d.cfg.NSJail {
		return "docker-nsjail"
	}
	return "docker"
}

// Profile is the io.codellm.runtime-profile label of the containers this supervisor creates.
func (d *Docker) Profile() string { return d.profile }

// Execute runs one request in the session's container, creating it when missing. A stateless call
// (no runtime session) gets an assignment-<id> container that is removed afterwards.
func (d *Docker) Execute(ctx context.Context, call RunnerCall) (*bridge.Object, error) {
	sid := call.SessionID
	if sid == "" {
		sid = "assignment-" + call.AssignmentID
	}
	name := ContainerName(sid)
	unlock := d.lock(name)
	defer unlock()
	sp := &d.runSpec
	if call.SessionID == "" {
		defer func() { _ = d.remove(context.WithoutCancel(ctx), name) }()
		sp = &d.stateless
	} else {
		release, err := d.use(ctx, name)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	if err := d.ensure(ctx, name, call.SessionID != "", sp); err != nil {
		return nil, err
	}
	return d.exec(ctx, name, call)
}

func (d *Docker) Reset(ctx context.Context, sessionID string) error {
	return d.discard(ctx, ContainerName(sessionID))
}

func (d *Docker) Quarantine(ctx context.Context, sessionID string) error {
	return d.discard(ctx, ContainerName(sessionID))
}

// RemoveContainer removes a session's container with the CLI alone (reset-workspace with the worker
// stopped).
func RemoveContainer(ctx context.Context, cli, sessionID string) error {
	if cli == "" {
		cli = "docker"
	}
	return (&Docker{cfg: DockerConfig{CLI: cli}}).remove(ctx, ContainerName(sessionID))
}

func (d *Docker) removeLocked(ctx context.Context, name string) error {
	unlock := d.lock(name)
	defer unlock()
	return d.remove(ctx, name)
}

// remove is `container rm --force`; a missing container is fine.
func (d *Docker) remove(ctx context.Context, name string) error {
	_, err := d.cli(ctx, nil, "container", "rm", "--force", name)
	if err != nil && !isMissing(err) {
		return fmt.Errorf("remove runtime container %s: %w", name, err)
	}
	return nil
}

func (d *Docker) lock(name string) func() {
	d.mu.Lock()
	l := d.locks[name]
	if l == nil {
		l = &sessionLock{}
		d.locks[name] = l
	}
	l.refs++
	d.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		d.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(d.locks, name)
		}
		d.mu.Unlock()
	}
}

// stateLoss fails an assignment whose session state is gone: never known-clean, so a stateful session
// is quarantined rather than continued as if nothing happened.
func stateLoss(format string, args ...any) error {
	return &RunError{Message: "runtime session state lost: " + fmt.Sprintf(format, args...)}
}

// ensure makes the container exist, run the current profile and answer its health check.
func (d *Docker) ensure(ctx context.Context, name string, stateful bool, sp *runSpec) error {
	out, err := d.cli(ctx, nil, "container", "inspect", "--format",
		`{{.State.Running}} {{index .Config.Labels "io.codellm.runtime-profile"}}`, name)
	switch {
	case err != nil && isMissing(err):
		return d.create(ctx, name, sp)
	case err != nil:
		return &RunError{Message: "inspect runtime container: " + err.Error(), KnownClean: true}
	}
	running, profile, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if profile != sp.profile {
		if err := d.remove(ctx, name); err != nil {
			return &RunError{Message: err.Error()}
		}
		if !stateful {
			return d.create(ctx, name, sp)
		}
		return stateLoss("container %s was created with another runtime profile and has been discarded", name)
	}
	if running == "true" {
		return nil
	}
	if d.cfg.NSJail {
		if err := d.remove(ctx, name); err != nil {
			return &RunError{Message: err.Error()}
		}
		return stateLoss("container %s had stopped and has been removed", name)
	}
	if _, err := d.cli(ctx, nil, "start", name); err != nil {
		return &RunError{Message: "start runtime container: " + err.Error()}
	}
	return d.health(ctx, name)
}

func (d *Docker) create(ctx context.Context, name string, sp *runSpec) error {
	args := append([]string{"run", "--detach", "--name", name, "--label", "io.codellm.runtime-hash=" + strings.TrimPrefix(name, "codellm-")}, sp.args...)
	if _, err := d.cli(ctx, nil, args...); err != nil {
		_ = d.remove(context.WithoutCancel(ctx), name)
		return &RunError{Message: "create runtime container: " + err.Error(), KnownClean: true}
	}
	if err := d.health(ctx, name); err != nil {
		_ = d.remove(context.WithoutCancel(ctx), name)
		return err
	}
	return nil
}

// health polls the runner's health route inside the container every 100 ms until it answers 200.
func (d *Docker) health(ctx context.Context, name string) error {
	deadline := time.Now().Add(d.cfg.HealthWait)
	last := ""
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return &RunError{Message: fmt.Sprintf("runtime container %s did not become healthy within %v (%s)", name, d.cfg.HealthWait, last), KnownClean: true}
		}
		maxTime := strconv.FormatFloat(min(left, 5*time.Second).Seconds(), 'f', 3, 64)
		out, err := d.cli(ctx, nil, "exec", name, "curl", "--silent", "--show-error", "--max-time", maxTime,
			"--output", "/dev/null", "--write-out", "%{http_code}", containerRunner+"/health")
		if err == nil && strings.TrimSpace(string(out)) == "200" {
			return nil
		}
		last = strings.TrimSpace(string(out))
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return &RunError{Message: "waiting for the runtime container: " + ctx.Err().Error(), KnownClean: true}
		case <-time.After(healthPollInterval):
		}
	}
}

// exec posts the body to the container's runner (§11.4 Execute) and classifies the reply (§11.1).
func (d *Docker) exec(ctx context.Context, name string, call RunnerCall) (*bridge.Object, error) {
	hdrs := slices.Clone(call.Headers)
	hdrs = append(hdrs, [2]string{"Content-Type", "application/json"})
	if call.SessionID != "" {
		hdrs = append(hdrs, [2]string{wire.RuntimeSessionHeader, call.SessionID})
	}
	status, body, err := d.post(ctx, name, "/execute", hdrs, call.Body, nil)
	if err != nil {
		return nil, err
	}
	return classify(status, body)
}

// post sends body to the runner route path through `docker exec --interactive … curl` and reads the status
// code after a per-call random marker, so no reply body can forge it. pre, when set, runs curl through
// `sh -c` inside the container with these words before "$@" (the runtime command route adds its token
// header from the container's own environment: the capability never appears in a host argv).
func (d *Docker) post(ctx context.Context, name, path string, hdrs [][2]string, body []byte, pre []string) (int, []byte, error) {
	var mb [32]byte
	_, _ = rand.Read(mb[:])
	marker := hex.EncodeToString(mb[:])
	args := []string{"exec", "--interactive", name}
	args = append(args, pre...)
	args = append(args, "curl", "--silent", "--show-error", "--request", "POST")
	for _, kv := range hdrs {
		if strings.ContainsAny(kv[0]+kv[1], "\r\n\x00") || kv[0] == "" || strings.ContainsAny(kv[0], ": ") {
			return 0, nil, &RunError{Message: "request header " + strconvQuote(kv[0]) + " contains CR, LF or a separator", KnownClean: true}
		}
		args = append(args, "--header", kv[0]+": "+kv[1])
	}
	args = append(args, "--data-binary", "@-", "--write-out", "\n"+marker+"%{http_code}", containerRunner+path)
	out, err := d.cli(ctx, body, args...)
	if err != nil {
		return 0, nil, &RunError{Message: "runtime container execution failed: " + err.Error()}
	}
	i := bytes.LastIndex(out, []byte("\n"+marker))
	if i < 0 || len(out)-(i+1+len(marker)) != 3 {
		return 0, nil, &RunError{Message: "runtime container reply is not framed by the marker"}
	}
	status, err := strconv.Atoi(string(out[i+1+len(marker):]))
	if err != nil || status < 100 {
		return 0, nil, &RunError{Message: "runtime container reply has no HTTP status"}
	}
	return status, out[:i], nil
}

func strconvQuote(s string) string { return strconv.Quote(s) }

// cliError is a failed CLI run with its stderr.
type cliError struct {
	args   []string
	stderr string
	err    error
}

func (e *cliError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if msg == "" {
		msg = e.err.Error()
	}
	return e.args[0] + ": " + msg
}

// isMissing recognises "No such container" / "no such object" from docker and podman.
func isMissing(err error) bool {
	var ce *cliError
	if !errors.As(err, &ce) {
		return false
	}
	s := strings.ToLower(ce.stderr)
	return strings.Contains(s, "no such container") || strings.Contains(s, "no such object")
}

// cli runs the container CLI directly (no shell), stdout capped at 64 MiB.
func (d *Docker) cli(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, d.cfg.CLI, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	stdout := &capBuffer{max: maxCLIOutput}
	stderr := &capBuffer{max: maxCLIStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if stdout.over {
		return nil, &cliError{args: args, err: errors.New("output exceeds 64 MiB")}
	}
	if err != nil {
		return stdout.Bytes(), &cliError{args: args, stderr: stderr.String(), err: err}
	}
	return stdout.Bytes(), nil
}

// capBuffer keeps at most max bytes and remembers that more came.
type capBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.over = true
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return c.Buffer.Write(p)
}
