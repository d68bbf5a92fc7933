//go:build !linux

package runner

import "errors"

func mountQuota(dir string, size int64) error {
	return errors.New("WorkspaceSize needs Linux (a tmpfs per workspace)")
}

func unmountQuota(dir string) error { return nil }
