//go:build !linux

package worker

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrLocked: another live worker holds the run lock.
var ErrLocked = errors.New("another worker process holds the run lock")

// RunLock is a best-effort run lock on platforms without flock support in this build: an exclusive
// file that is removed on release.
type RunLock struct{ path string }

// AcquireRunLock creates the lock file exclusively.
func AcquireRunLock(path string) (*RunLock, error) {
	if err := mkdirPrivate(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, ErrLocked
		}
		return nil, err
	}
	f.Close()
	return &RunLock{path: path}, nil
}

// Release removes the lock file.
func (l *RunLock) Release() {
	if l != nil && l.path != "" {
		_ = os.Remove(l.path)
		l.path = ""
	}
}
