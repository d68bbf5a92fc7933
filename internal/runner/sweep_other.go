//go:build !linux

package runner

import "os"

// Without flock and mountinfo handling, leftovers of crashed runners are not swept.
func lockDir(dir string) (*os.File, error) { return nil, nil }

func sweepStale(root, self string) (removed []string, errs []error) { return nil, nil }
