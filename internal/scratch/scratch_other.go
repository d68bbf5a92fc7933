//go:build !linux

package scratch

import (
	"log/slog"
	"os"
)

// Open returns the work root itself: the scratch tmpfs needs Linux.
func Open(workRoot string, log *slog.Logger) (*Dir, error) {
	if workRoot == "" {
		workRoot = os.TempDir()
	}
	return unmounted(workRoot, "a scratch tmpfs needs Linux", log), nil
}
