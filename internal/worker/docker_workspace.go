package worker

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unicode/utf8"

	"github.com/codellm/codellm/internal/wire"
	"github.com/codellm/codellm/internal/workspace"
)

// The runtime command sandbox of docker-nsjail (bridge-protocol §11.4): workspace commands run inside a
// runtime container of their own, against the workspace mounted at /mnt/workspace, through the
// container runner's POST /api/v2/workspace/execute, authenticated by an HMAC capability token.

// WorkspaceCommandToken is t = base64url(HMAC-SHA256(key, "codellm-workspace-command-v1\0" + root)), where key
// is the worker's private-key PEM (or its static token) and root the canonical workspace root.
func WorkspaceCommandToken(key, root string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("codellm-workspace-command-v1\x00" + root))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// WorkspaceCommandSession is the runtime session of a workspace's commands:
// workspace-<H(workerId "\0" workspaceId)[:40]>.
func WorkspaceCommandSession(workerID, workspaceID string) string {
	sum := sha256.Sum256([]byte(workerID + "\x00" + workspaceID))
	return "workspace-" + hex.EncodeToString(sum[:])[:40]
}

// WorkspaceMount configures the runtime command sandbox.
type WorkspaceMount struct {
	Root      string // canonical workspace root on the host
	Token     string // WorkspaceCommandToken
	SessionID string // WorkspaceCommandSession
	ReadOnly  bool   // mount the root read-only (the workspace is not writable)
}

// DockerCommands runs a workspace's commands in its runtime container; it is the workspace's
// CommandRunner.
type DockerCommands struct {
	d    *Docker
	m    WorkspaceMount
	spec runSpec
}

// WorkspaceCommands prepares the runtime command sandbox (docker-nsjail only). Only the command container
// gets the workspace: runner sessions never see it. It runs as the root directory's owner, so the sandbox
// inside maps the command to that owner and files it creates belong to the user, never to root or 10001.
func (d *Docker) WorkspaceCommands(m WorkspaceMount) (*DockerCommands, error) {
	if !d.cfg.NSJail {
		return nil, fmt.Errorf("%w: the runtime command sandbox requires the docker-nsjail runtime supervisor", ErrConfig)
	}
	if len(m.Token) < 32 || m.SessionID == "" || !filepath.IsAbs(m.Root) {
		return nil, fmt.Errorf("%w: runtime command sandbox: incomplete configuration", ErrConfig)
	}
	fi, err := os.Stat(m.Root)
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: runtime command sandbox: the workspace root is not a directory", ErrConfig)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fmt.Errorf("%w: runtime command sandbox: cannot read the workspace root's owner", ErrConfig)
	}
	mount := "type=bind,src=" + m.Root + ",dst=" + workspace.ContainerRoot
	if m.ReadOnly {
		mount += ",readonly"
	}
	env := []string{workspace.EnvRouteEnabled + "=true", workspace.EnvRouteRoot + "=" + workspace.ContainerRoot,
		workspace.EnvRouteToken + "=" + m.Token,
		"CODELLM_WORK_DIR=/tmp"} // the image's work dir belongs to its own uid, not to the workspace owner
	user := strconv.FormatUint(uint64(st.Uid), 10) + ":" + strconv.FormatUint(uint64(st.Gid), 10)
	return &DockerCommands{d: d, m: m, spec: d.runArgs([]string{mount}, env, user)}, nil
}

// tokenShell runs curl with the token header taken from the container's environment.
var tokenShell = []string{"sh", "-c", `[ -n "$` + workspace.EnvRouteToken + `" ] || exit 97; exec "$@" --header "` +
	workspace.TokenHeader + `: $` + workspace.EnvRouteToken + `"`, "sh"}

// RunCommand implements workspace.CommandRunner. Failures before the command can have started are atomic;
// anything after it is "may have committed", and the container is removed (which ends whatever still runs).
func (c *DockerCommands) RunCommand(ctx context.Context, cmd workspace.Command) (*workspace.ExecuteCommandResult, error) {
	name := ContainerName(c.m.SessionID)
	unlock := c.d.lock(name)
	defer unlock()
	// The container holds no state (the workspace is the host's directory): a stale one is simply replaced.
	if err := c.d.ensure(ctx, name, false, &c.spec); err != nil {
		return nil, &workspace.Error{Code: workspace.CodeCommandUnavailable, Message: "runtime command sandbox: " + err.Error()}
	}
	body := map[string]any{"command": cmd.Command, "timeoutMs": cmd.TimeoutMs, "maxOutputBytes": cmd.MaxOutputBytes}
	if cmd.Cwd != "" {
		body["cwd"] = cmd.Cwd
	}
	b, _ := json.Marshal(body)
	hdrs := [][2]string{{"Content-Type", "application/json"}, {wire.RuntimeSessionHeader, c.m.SessionID}}
	status, reply, err := c.d.post(ctx, name, "/workspace/execute", hdrs, b, tokenShell)
	fail := func(code workspace.Code, msg string) error {
		_ = c.d.remove(context.WithoutCancel(ctx), name)
		return &workspace.Error{Code: code, Message: msg, MayHaveCommitted: true}
	}
	switch {
	case ctx.Err() != nil:
		return nil, fail(workspace.CodeExecutionAborted, "the command was cancelled")
	case err != nil:
		return nil, fail(workspace.CodeCommandUnavailable, "sandboxed command execution unavailable: "+err.Error())
	case status == 400:
		return nil, &workspace.Error{Code: workspace.CodeInvalidRequest, Message: "sandboxed command request was rejected: " + replyMessage(reply)}
	case status > 400 && status < 500:
		return nil, &workspace.Error{Code: workspace.CodeCommandUnavailable, Message: fmt.Sprintf("sandboxed command request was rejected with HTTP %d: %s", status, replyMessage(reply))}
	case status < 200 || status > 299:
		return nil, fail(workspace.CodeCommandUnavailable, fmt.Sprintf("sandbox rejected command with HTTP %d: %s", status, replyMessage(reply)))
	}
	res, err := parseCommandReply(reply, cmd.MaxOutputBytes)
	if err != nil {
		return nil, fail(workspace.CodeCommandUnavailable, "invalid sandbox response: "+err.Error())
	}
	return res, nil
}

// parseCommandReply validates {exitCode, signal?, stdout, stderr, truncated, timedOut} as §9.8 states it:
// no other key, every required key present with its type, exitCode in 0..255 and null iff timedOut or a
// signal, stdout and stderr together within the output budget.
func parseCommandReply(b []byte, maxOut int) (*workspace.ExecuteCommandResult, error) {
	var r struct {
		ExitCode  json.RawMessage `json:"exitCode"`
		Signal    *string         `json:"signal"`
		Stdout    *string         `json:"stdout"`
		Stderr    *string         `json:"stderr"`
		Truncated *bool           `json:"truncated"`
		TimedOut  *bool           `json:"timedOut"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if r.ExitCode == nil || r.Stdout == nil || r.Stderr == nil || r.Truncated == nil || r.TimedOut == nil {
		return nil, fmt.Errorf("a required field is missing")
	}
	out := &workspace.ExecuteCommandResult{Stdout: *r.Stdout, Stderr: *r.Stderr, Truncated: *r.Truncated, TimedOut: *r.TimedOut}
	if r.Signal != nil {
		if *r.Signal == "" {
			return nil, fmt.Errorf("signal is empty")
		}
		out.Signal = *r.Signal
	}
	if string(r.ExitCode) != "null" {
		var code int
		if err := json.Unmarshal(r.ExitCode, &code); err != nil || code < 0 || code > 255 {
			return nil, fmt.Errorf("exitCode is not an integer in 0..255")
		}
		out.ExitCode = &code
	}
	if (out.ExitCode == nil) != (out.TimedOut || out.Signal != "") {
		return nil, fmt.Errorf("exitCode must be null exactly when the command timed out or was signalled")
	}
	if len(out.Stdout)+len(out.Stderr) > maxOut || !utf8.ValidString(out.Stdout) || !utf8.ValidString(out.Stderr) {
		return nil, fmt.Errorf("output exceeds maxOutputBytes or is not UTF-8")
	}
	return out, nil
}

// replyMessage is the runner's {message} (bounded), or a placeholder.
func replyMessage(b []byte) string {
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &m) != nil || m.Message == "" {
		return "no message"
	}
	if len(m.Message) > 500 {
		m.Message = m.Message[:500]
	}
	return m.Message
}
