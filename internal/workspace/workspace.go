package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// Operation names (§9).
const (
	OpReadFile       = "read_file"
	OpSearchText     = "search_text"
	OpListFiles      = "list_files"
	OpWriteFile      = "write_file"
	OpEditFile       = "edit_file"
	OpPreviewEdit    = "preview_edit"
	OpExecuteCommand = "execute_command"
)

// Options say what a registered workspace may do.
type Options struct {
	// AllowWrites enables write_file, edit_file and preview_edit; without it they answer WRITE_DISABLED.
	AllowWrites bool
	// AllowCommands enables execute_command. It also needs Sandbox; without one the answer is COMMAND_DISABLED.
	AllowCommands bool
	// Sandbox runs execute_command (Persist mode, the root as its workdir, no network). nil means commands
	// are unavailable: there is no host-shell fallback.
	Sandbox *sandbox.Sandbox
	// AllowUnconfinedCommands permits execute_command under a sandbox in mode "off"; without it such a sandbox
	// is refused, so that an unconfined host process is only ever an explicit operator choice.
	AllowUnconfinedCommands bool
	// HomeDir is the user's home directory, which the root may not contain ("" = os.UserHomeDir()).
	HomeDir string
	// ProtectedPaths are codellm's identity file, quarantine marker, run lock and sandbox scratch space: none may
	// lie inside the root. They need not exist yet.
	ProtectedPaths []string
	// RipgrepPath overrides the rg executable ("" = look up "rg" in PATH).
	RipgrepPath string
	// CommandRunner, when set, runs execute_command instead of Sandbox: the docker-nsjail runtime command
	// sandbox (bridge-protocol §11.4), where the command runs inside the session container against the root
	// mounted at /mnt/workspace. The request is validated here first, cwd included.
	CommandRunner CommandRunner
}

// CommandRunner runs one validated execute_command elsewhere. Errors must be *Error values (§9.9 codes).
type CommandRunner interface {
	RunCommand(ctx context.Context, c Command) (*ExecuteCommandResult, error)
}

// Command is a validated execute_command: Cwd is the cleaned relative directory ("" = the root), the
// limits are the request's or their defaults.
type Command struct {
	Command        string
	Cwd            string
	TimeoutMs      int
	MaxOutputBytes int
}

// Workspace is one registered root. Its methods are safe for concurrent use; mutations of one workspace are
// serialised, and so are its commands.
type Workspace struct {
	opts Options
	real string // realpath at registration; never shown to callers
	id   fileID
	res  resolver

	writeMu sync.Mutex
	cmdOnce sync.Once
	cmdSem  chan struct{}
}

// StatePaths are the directories under home where codellm keeps worker identities, quarantine markers and
// run locks (~/.config/codellm, ~/.local/state/codellm). Every front end passes them as ProtectedPaths, so
// that no workspace root — `codellm workspace --root ~/.config` included — can expose them.
func StatePaths(home string) []string {
	if home == "" {
		return nil
	}
	return []string{filepath.Join(home, ".config", "codellm"), filepath.Join(home, ".local", "state", "codellm")}
}

// Open registers root: an existing directory that does not contain the home directory or any protected path.
// The root is opened once; every later access is resolved beneath that descriptor.
func Open(root string, opts Options) (*Workspace, error) {
	if root == "" {
		return nil, newErr(CodeRegistrationInvalid, "workspace root is empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, newErr(CodeRegistrationInvalid, "workspace root cannot be made absolute")
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, newErr(CodeRegistrationInvalid, "workspace root does not exist or cannot be resolved")
	}
	fi, err := os.Lstat(real)
	if err != nil || !fi.IsDir() {
		return nil, newErr(CodeRegistrationInvalid, "workspace root is not a directory")
	}
	home := opts.HomeDir
	if home == "" {
		home, _ = os.UserHomeDir()
		opts.HomeDir = home
	}
	if home != "" && contains(real, resolveLoose(home)) {
		return nil, newErr(CodeRegistrationInvalid, "workspace root contains the home directory")
	}
	for _, p := range opts.ProtectedPaths {
		if p != "" && contains(real, resolveLoose(p)) {
			return nil, newErr(CodeRegistrationInvalid, "workspace root contains codellm's identity or state files")
		}
	}
	res, err := newResolver(real)
	if err != nil {
		return nil, newErr(CodeRegistrationInvalid, "workspace root cannot be opened: "+errnoText(err))
	}
	id, err := res.rootID()
	if err != nil || id != infoOf(fi).id {
		res.close()
		return nil, newErr(CodeRegistrationInvalid, "workspace root changed while it was being registered")
	}
	return &Workspace{opts: opts, real: real, id: id, res: res}, nil
}

// Close releases the root descriptor.
func (w *Workspace) Close() error { return w.res.close() }

// Writable reports whether mutating tools are enabled.
func (w *Workspace) Writable() bool { return w.opts.AllowWrites }

// Operations lists the operations this workspace can serve, in §8.1's order. execute_command appears only when
// commands are enabled and a usable sandbox is configured; the worker additionally gates it on the sandbox's
// startup self-test.
func (w *Workspace) Operations() []string {
	ops := []string{OpReadFile, OpSearchText, OpListFiles}
	if w.opts.AllowWrites {
		ops = append(ops, OpWriteFile, OpPreviewEdit, OpEditFile)
	}
	if w.commandsUsable() == nil {
		ops = append(ops, OpExecuteCommand)
	}
	return ops
}

// contains reports whether p is root or lies beneath it (both absolute, cleaned).
func contains(root, p string) bool {
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// resolveLoose is the realpath of p where p (or its longest existing ancestor) exists; the rest is appended
// cleaned. Protected files such as the quarantine marker may not exist yet, but their future location counts.
func resolveLoose(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	rest := ""
	cur := abs
	for {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return abs
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// checkRoot refuses to work on a root that is no longer the directory registered: the path now names another
// directory (or nothing), so the worker's registration no longer describes what it would touch.
func (w *Workspace) checkRoot() error {
	id, err := w.res.rootID()
	if err != nil || id != w.id {
		return newErr(CodeRegistrationInvalid, "workspace root descriptor is no longer valid")
	}
	fi, err := os.Lstat(w.real)
	if err != nil || !fi.IsDir() || infoOf(fi).id != w.id {
		return newErr(CodeRegistrationInvalid, "workspace root was moved, replaced or removed since registration")
	}
	return nil
}

// DefaultSpec identifies §5's application-owned default workspace.
type DefaultSpec struct {
	HubURL      string // base URL without trailing "/"
	Secret      string // the public-key PEM, or the static token
	WorkerID    string
	WorkspaceID string
	Home        string // "" = os.UserHomeDir()
}

func hexHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// DefaultRoot is §5's default workspace path:
// ~/.local/share/codellm/worker/workspaces/id-<H(url "\0" sec)>/id-<H(workerId)>/id-<H(workspaceId)>.
func DefaultRoot(s DefaultSpec) (string, error) {
	home := s.Home
	if home == "" {
		var err error
		if home, err = os.UserHomeDir(); err != nil {
			return "", newErr(CodeRegistrationInvalid, "no home directory for the default workspace")
		}
	}
	if s.WorkerID == "" || s.WorkspaceID == "" {
		return "", newErr(CodeRegistrationInvalid, "default workspace needs a worker ID and a workspace ID")
	}
	url := strings.TrimRight(s.HubURL, "/")
	return filepath.Join(home, ".local", "share", "codellm", "worker", "workspaces",
		"id-"+hexHash(url+"\x00"+s.Secret), "id-"+hexHash(s.WorkerID), "id-"+hexHash(s.WorkspaceID)), nil
}

// EnsureDefault creates the default workspace with mode 0700 (parents too) and returns its path. An existing
// entry that lstat shows to be a symlink or a non-directory is refused, so that nobody can point codellm's own
// workspace somewhere else.
func EnsureDefault(s DefaultSpec) (string, error) {
	p, err := DefaultRoot(s)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(p, 0o700); err != nil {
		return "", newErr(CodeRegistrationInvalid, "cannot create the default workspace: "+errnoText(err))
	}
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return "", newErr(CodeRegistrationInvalid, "default workspace is a symlink or not a directory")
	}
	return p, nil
}

// Do runs one operation. req is the §9.2 request object (protocolVersion, operation and workspaceId may be
// present and are then checked); the result is the operation's §9.2 result fields, without the envelope, which
// the caller adds. Every error is an *Error with a §9.9 code.
func (w *Workspace) Do(ctx context.Context, op string, req json.RawMessage) (json.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, newErr(CodeExecutionAborted, "operation cancelled before it started")
	}
	switch op {
	case OpReadFile:
		return run(ctx, w, op, req, w.ReadFile)
	case OpSearchText:
		return run(ctx, w, op, req, w.SearchText)
	case OpListFiles:
		return run(ctx, w, op, req, w.ListFiles)
	case OpWriteFile:
		return run(ctx, w, op, req, w.WriteFile)
	case OpEditFile:
		return run(ctx, w, op, req, w.EditFile)
	case OpPreviewEdit:
		return run(ctx, w, op, req, w.PreviewEdit)
	case OpExecuteCommand:
		return run(ctx, w, op, req, w.ExecuteCommand)
	}
	return nil, newErr(CodeInvalidRequest, "unknown operation "+wire.ClipUTF16(op, 64))
}

type request interface{ env() *envelope }

func (e *envelope) env() *envelope { return e }

func run[Req any, Res any, PReq interface {
	*Req
	request
}](ctx context.Context, w *Workspace, op string, raw json.RawMessage, fn func(context.Context, PReq) (*Res, error)) (json.RawMessage, error) {
	var r Req
	if err := decodeStrict(raw, &r); err != nil {
		return nil, err
	}
	if err := PReq(&r).env().check(op); err != nil {
		return nil, err
	}
	res, err := fn(ctx, &r)
	if err != nil {
		return nil, asError(err, CodeInvalidRequest, "operation failed")
	}
	out, err := encodeResult(res)
	if err != nil {
		return nil, newErr(CodeInvalidRequest, "result cannot be encoded")
	}
	return out, nil
}

// ctxErr maps a finished context to EXECUTION_ABORTED; deadline handling specific to each tool comes first.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return newErr(CodeExecutionAborted, "the assignment deadline passed")
		}
		return newErr(CodeExecutionAborted, "the operation was cancelled")
	}
	return nil
}
