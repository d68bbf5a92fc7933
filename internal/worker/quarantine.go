package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// Marker is the mutation quarantine marker (§10.1). Its presence means a workspace mutation may have
// happened without the hub learning its outcome, so the worker must not serve that workspace again until a
// human inspected it and cleared the marker.
type Marker struct {
	Version       int    `json:"version"`
	WorkerID      string `json:"workerId"`
	WorkspaceID   string `json:"workspaceId"`
	OwnerID       string `json:"ownerId"`
	QuarantinedAt string `json:"quarantinedAt"`
	Reason        string `json:"reason"`
}

// ErrMarkerExists: arming found a marker already present (another incarnation's, or our own unsettled one).
var ErrMarkerExists = errors.New("quarantine marker already exists")

// CanonicalURL is §5's canonURL: no trailing '/', no fragment, no default port, lower-case scheme and
// host, and "/" for an empty path.
func CanonicalURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("%w: invalid hub URL %q", ErrConfig, raw)
	}
	u.Fragment, u.RawFragment = "", ""
	u.Scheme = strings.ToLower(u.Scheme)
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	u.Host = host
	if u.Path == "" {
		u.Path, u.RawPath = "/", ""
	}
	return u.String(), nil
}

// MarkerPath is ~/.local/state/codellm/worker/quarantines/id-<H(canonURL)>/id-<H(workerId)>/id-<H(realpath(root))>.json.
func MarkerPath(home, hubURL, workerID, root string) (string, error) {
	canon, err := CanonicalURL(hubURL)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("%w: workspace root: %v", ErrConfig, err)
	}
	real, _ = filepath.Abs(real)
	h := func(s string) string { return "id-" + bridge.SHA256Hex([]byte(s)) }
	return filepath.Join(home, ".local", "state", "codellm", "worker", "quarantines", h(canon), h(workerID), h(real)+".json"), nil
}

// LockPath is ~/.local/state/codellm/worker/locks/id-<H(canonURL "\0" workerId)>.lock.
func LockPath(home, hubURL, workerID string) (string, error) {
	canon, err := CanonicalURL(hubURL)
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "codellm", "worker", "locks",
		"id-"+bridge.SHA256Hex([]byte(canon+"\x00"+workerID))+".lock"), nil
}

// CheckMarker returns nil when no marker exists at path. A marker that exists, cannot be read, is group- or
// other-accessible, or is malformed is a local quarantine (ErrQuarantined).
func CheckMarker(path string) error {
	m, err := readMarker(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: workspace mutation quarantine marker %s is unusable (%v); inspect the workspace, then run `codellm worker clear-workspace-quarantine`",
			ErrQuarantined, path, err)
	}
	return fmt.Errorf("%w: workspace %q has a pending mutation quarantine since %s (%s); inspect the workspace, then run `codellm worker clear-workspace-quarantine`",
		ErrQuarantined, m.WorkspaceID, m.QuarantinedAt, m.Reason)
}

func readMarker(path string) (*Marker, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, os.ErrNotExist
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("mode %04o is group/other accessible", fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, err
	}
	var m Marker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if m.Version != 1 || strings.TrimSpace(m.Reason) == "" {
		return nil, errors.New("malformed marker")
	}
	if _, err := bridge.ParseTime(m.QuarantinedAt); err != nil {
		return nil, errors.New("malformed quarantinedAt")
	}
	return &m, nil
}

// ArmMarker creates the marker before a mutation (§10.1): parents 0700, O_EXCL|O_NOFOLLOW 0600, owner-only
// verified, JSON written and fsynced with its directory. A partial write removes the file.
func ArmMarker(path string, m Marker) (err error) {
	dir := filepath.Dir(path)
	if err := mkdirPrivate(dir); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return ErrMarkerExists
		}
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(path)
			_ = syncDir(dir)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("marker keeps mode %04o after chmod 0600", fi.Mode().Perm())
	}
	m.Version = 1
	if m.QuarantinedAt == "" {
		m.QuarantinedAt = bridge.FormatTime(time.Now())
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if _, err = f.Write(append(b, '\n')); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return syncDir(dir)
}

// ClearOwnedMarker removes the marker after the hub accepted the settlement. The marker must still name
// owner as its ownerId: an incarnation never clears another's marker.
func ClearOwnedMarker(path, owner string) error {
	m, err := readMarker(path)
	if err != nil {
		return fmt.Errorf("%w: re-reading the marker before clearing it: %v", ErrQuarantined, err)
	}
	if m.OwnerID != owner {
		return fmt.Errorf("%w: marker belongs to incarnation %s, not %s", ErrQuarantined, m.OwnerID, owner)
	}
	return RemoveMarker(path)
}

// RemoveMarker deletes the marker unconditionally and fsyncs its directory (clear-workspace-quarantine).
// A missing marker is not an error.
func RemoveMarker(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}
