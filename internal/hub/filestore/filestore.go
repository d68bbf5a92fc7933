// Package filestore keeps the files of the hub's Code API sessions (LibreChat's /v1/upload,
// /v1/files/{session}, /v1/download/{session}/{file} and the files of /v1/exec): uploads, and what runs
// generate. A session belongs to one tenant; every read names the tenant, and a session or file of
// another tenant is reported exactly like an unknown one (ErrNotFound), so ids reveal nothing.
//
// Two backends share one contract (see storetest in filestore_test.go): Dir, a directory beside the
// embedded bbolt store for one hub node, and Redis, for hub replicas sharing one Redis. Both enforce the
// same Limits — bytes per file, files and bytes per session, bytes in total — and store a batch all or
// nothing: a Put that would pass any cap stores none of its files. A session expires TTL after its last
// write or Touch, and its files with it (LibreChat re-uploads files older than 23 hours itself).
//
// Ids are 21 characters of [A-Za-z0-9_-] from crypto/rand, the shape LibreChat validates
// (^[A-Za-z0-9_-]{21}$) for both session and file ids.
package filestore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/wire"
)

// File is one stored file's metadata.
type File struct {
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	Name      string    `json:"name"` // relative, clean, slash-separated
	Size      int64     `json:"size"`
	EntityID  string    `json:"entity_id,omitempty"`
	Created   time.Time `json:"created"`
	// ReadOnly marks an infrastructure input (a skill's file, LibreChat's read_only upload): a run may
	// read it, and a run that changes it does not get the change back as a generated file.
	ReadOnly bool `json:"read_only,omitempty"`
}

// Upload is one file to store.
type Upload struct {
	Name     string
	EntityID string
	ReadOnly bool
	Data     []byte
}

// Limits are the caps every backend enforces. Zero fields take the defaults.
type Limits struct {
	MaxFileBytes    int64         // one file; default 25 MiB (upstream MAX_FILE_SIZE)
	MaxSessionBytes int64         // all files of a session; default 100 MiB
	MaxSessionFiles int           // files of a session; default 256
	MaxTotalBytes   int64         // all sessions together; default 2 GiB
	MaxTenantBytes  int64         // all sessions of one tenant; default 1 GiB, so no tenant fills the store alone
	TTL             time.Duration // a session's life after its last write; default 24 h
}

// Defaults of Limits.
const (
	DefaultMaxFileBytes    = 25 << 20
	DefaultMaxSessionBytes = 100 << 20
	DefaultMaxSessionFiles = 256
	DefaultMaxTotalBytes   = 2 << 30
	DefaultMaxTenantBytes  = 1 << 30
	DefaultTTL             = 24 * time.Hour
)

// WithDefaults returns l with zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.MaxSessionBytes <= 0 {
		l.MaxSessionBytes = DefaultMaxSessionBytes
	}
	if l.MaxSessionFiles <= 0 {
		l.MaxSessionFiles = DefaultMaxSessionFiles
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if l.MaxTenantBytes <= 0 {
		l.MaxTenantBytes = DefaultMaxTenantBytes
	}
	if l.TTL <= 0 {
		l.TTL = DefaultTTL
	}
	return l
}

// Store is a file store. Implementations are safe for concurrent use.
type Store interface {
	// Put stores files in the session, creating it for tenant when it does not exist. All or nothing:
	// on any error nothing of the batch is stored. ErrNotFound when the session belongs to another tenant.
	Put(ctx context.Context, tenant, sessionID string, files []Upload) ([]File, error)
	// Touch creates the session for tenant when new and extends its life. ErrNotFound when it belongs
	// to another tenant.
	Touch(ctx context.Context, tenant, sessionID string) error
	// Owner returns the tenant of a live session, or ErrNotFound.
	Owner(ctx context.Context, sessionID string) (string, error)
	// List returns the session's files, oldest first (empty for an unknown or foreign session).
	List(ctx context.Context, tenant, sessionID string) ([]File, error)
	// Get returns one file and its bytes, or ErrNotFound.
	Get(ctx context.Context, tenant, sessionID, fileID string) (File, []byte, error)
	// Delete removes one file (its bytes leave the session's and the store's usage), or answers
	// ErrNotFound for an unknown, foreign or already deleted one.
	Delete(ctx context.Context, tenant, sessionID, fileID string) error
	Close() error
}

// Errors. Every cap error wraps ErrLimit, so callers map them to one status.
var (
	ErrNotFound       = errors.New("filestore: no such session or file")
	ErrLimit          = errors.New("filestore: limit exceeded")
	ErrFileTooLarge   = fmt.Errorf("%w: file too large", ErrLimit)
	ErrSessionFull    = fmt.Errorf("%w: session file quota exceeded", ErrLimit)
	ErrTooManyFiles   = fmt.Errorf("%w: too many files in the session", ErrLimit)
	ErrStoreFull      = fmt.Errorf("%w: file store is full", ErrLimit)
	ErrTenantFull     = fmt.Errorf("%w: the tenant's file quota is used up", ErrLimit)
	ErrInvalid        = errors.New("filestore: invalid request")
	ErrClosed         = errors.New("filestore: store is closed")
	errCorrupt        = errors.New("filestore: corrupt record")
	idAlphabet        = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	idRE              = regexp.MustCompile(`^[A-Za-z0-9_-]{21}$`)
	maxNameComponents = 16
)

// NewID mints 21 characters of [A-Za-z0-9_-] (126 bits) from crypto/rand.
func NewID() string {
	b := make([]byte, 21)
	if _, err := rand.Read(b); err != nil {
		panic("filestore: crypto/rand failed: " + err.Error())
	}
	for i := range b {
		b[i] = idAlphabet[b[i]&63]
	}
	return string(b)
}

// ValidID reports whether s has the shape of a session or file id.
func ValidID(s string) bool { return idRE.MatchString(s) }

// CheckName validates a file name as stored and written into a workspace: wire.CheckFileName's rule
// (a relative, clean, slash-separated path of printable UTF-8, at most 255 bytes per component and 1024
// in total), at most maxNameComponents deep. It returns "" or why the name is refused.
func CheckName(name string) string {
	if msg := wire.CheckFileName(name); msg != "" {
		return msg
	}
	if strings.Count(name, "/") >= maxNameComponents {
		return fmt.Sprintf("has more than %d components", maxNameComponents)
	}
	return ""
}

// check validates a Put before any backend work: ids, names and the per-file cap.
func check(l Limits, tenant, sessionID string, files []Upload) error {
	if tenant == "" || !ValidID(sessionID) {
		return fmt.Errorf("%w: tenant and a 21-character session id are required", ErrInvalid)
	}
	if len(files) > l.MaxSessionFiles {
		return ErrTooManyFiles
	}
	for i, f := range files {
		if msg := CheckName(f.Name); msg != "" {
			return fmt.Errorf("%w: files[%d]: name %q %s", ErrInvalid, i, f.Name, msg)
		}
		if int64(len(f.Data)) > l.MaxFileBytes {
			return fmt.Errorf("%w: %q is %d bytes (at most %d)", ErrFileTooLarge, f.Name, len(f.Data), l.MaxFileBytes)
		}
	}
	return nil
}

// newFile is the record of an upload stored now.
func newFile(sid string, u Upload, now time.Time) File {
	return File{ID: NewID(), SessionID: sid, Name: u.Name, Size: int64(len(u.Data)), EntityID: u.EntityID,
		Created: now.UTC(), ReadOnly: u.ReadOnly}
}

// batchBytes sums a batch's sizes.
func batchBytes(files []Upload) int64 {
	var n int64
	for _, f := range files {
		n += int64(len(f.Data))
	}
	return n
}
