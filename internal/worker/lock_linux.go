package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrLocked: another live worker holds the run lock.
var ErrLocked = errors.New("another worker process holds the run lock")

// RunLock is §5's flock-based run lock: one worker process per (hub, worker ID), and clear/reset
// commands refuse to run beside a live worker.
type RunLock struct{ f *os.File }

// AcquireRunLock takes the lock without waiting.
func AcquireRunLock(path string) (*RunLock, error) {
	if err := mkdirPrivate(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrLocked, path)
		}
		return nil, err
	}
	return &RunLock{f: f}, nil
}

// Release drops the lock.
func (l *RunLock) Release() {
	if l != nil && l.f != nil {
		_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		_ = l.f.Close()
		l.f = nil
	}
}
