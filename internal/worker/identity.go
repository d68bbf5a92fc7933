package worker

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/codellm/codellm/internal/bridge"
)

// Identity is the worker identity file (§5). Field order is the reference's, so files move between
// implementations.
type Identity struct {
	ProtocolVersion int    `json:"protocolVersion"`
	WorkerID        string `json:"workerId"`
	Credential      string `json:"credential"`
	ExpiresAt       string `json:"expiresAt"`
	CodeAPIURL      string `json:"codeApiUrl"`
	PublicKey       string `json:"publicKey"`
	PrivateKey      string `json:"privateKey"`

	priv ed25519.PrivateKey
}

// ErrIdentity is wrapped by every identity file failure.
var ErrIdentity = errors.New("identity file")

// PrivateKeyValue returns the parsed signing key (valid after LoadIdentity or Validate).
func (id *Identity) PrivateKeyValue() ed25519.PrivateKey { return id.priv }

// Validate checks all seven fields and that the keys belong together.
func (id *Identity) Validate() error {
	bad := func(msg string) error { return fmt.Errorf("%w: %s", ErrIdentity, msg) }
	switch {
	case id.ProtocolVersion != bridge.ProtocolVersion:
		return bad("protocolVersion must be 1")
	case !bridge.ValidWorkerID(id.WorkerID):
		return bad("invalid workerId")
	case !bridge.ValidToken(id.Credential):
		return bad("credential is too short")
	case id.CodeAPIURL == "":
		return bad("codeApiUrl is empty")
	}
	if _, err := bridge.ParseTime(id.ExpiresAt); err != nil {
		return bad("expiresAt is not a timestamp")
	}
	pub, err := bridge.ParsePublicKeyPEM(id.PublicKey)
	if err != nil {
		return bad("publicKey: " + err.Error())
	}
	priv, err := bridge.ParsePrivateKeyPEM(id.PrivateKey)
	if err != nil {
		return bad("privateKey: " + err.Error())
	}
	if !pub.Equal(priv.Public()) {
		return bad("publicKey does not match privateKey")
	}
	id.priv = priv
	return nil
}

// IdentityFileName is §5's <name>.json: characters outside [A-Za-z0-9._-] become '_', plus
// -<first 16 hex of H(workerId)> if anything was replaced ("my:vm" → "my_vm-6c2611a7f97e4177.json").
func IdentityFileName(workerID string) string {
	var b strings.Builder
	replaced := false
	for _, r := range workerID {
		if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			b.WriteRune(r)
			continue
		}
		b.WriteByte('_')
		replaced = true
	}
	if replaced {
		b.WriteString("-" + bridge.SHA256Hex([]byte(workerID))[:16])
	}
	return b.String() + ".json"
}

// DefaultIdentityPath is ~/.config/codellm/worker/<name>.json.
func DefaultIdentityPath(home, workerID string) string {
	return filepath.Join(home, ".config", "codellm", "worker", IdentityFileName(workerID))
}

// LoadIdentity opens path, refuses it if group or other may access it (the key must then be treated as
// compromised), and validates it. workerID, when non-empty, must match.
func LoadIdentity(path, workerID string) (*Identity, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrIdentity, path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o; group/other access means the key may be compromised: revoke the worker and pair again",
			ErrIdentity, path, fi.Mode().Perm())
	}
	var id Identity
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&id); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrIdentity, path, err)
	}
	if err := id.Validate(); err != nil {
		return nil, err
	}
	if workerID != "" && id.WorkerID != workerID {
		return nil, fmt.Errorf("%w: file is for worker %q, not %q", ErrIdentity, id.WorkerID, workerID)
	}
	return &id, nil
}

// SaveIdentity writes id to path atomically with mode 0600 (§5): the temporary file is created
// O_EXCL|O_NOFOLLOW and checked owner-only before any key byte is written, fsynced, renamed over the
// target, and the parent directory is fsynced. On error the temporary file is removed.
func SaveIdentity(path string, id *Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	return writeFileAtomic(path, b)
}

func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := mkdirPrivate(dir); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	tmp := path + "." + hex.EncodeToString(randomBytes(8)) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		// A filesystem that ignores modes would leave the key readable: stop before writing it.
		return fmt.Errorf("%w: %s keeps mode %04o after chmod 0600", ErrIdentity, dir, fi.Mode().Perm())
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	if err = os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("%w: %v", ErrIdentity, err)
	}
	return syncDir(dir)
}

// mkdirPrivate creates dir and missing parents with mode 0700, fsyncing each new directory into its parent.
func mkdirPrivate(dir string) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirPrivate(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
