//go:build !linux

package testhelp

import (
	"os"
	"testing"
)

// RemoveWorkDir removes dir, a work directory a test server used. Only Linux runners mount workspace
// tmpfs (see mount_linux.go), so here it is os.RemoveAll, a failure failing the test.
func RemoveWorkDir(t testing.TB, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Errorf("remove the work dir %s: %v", dir, err)
	}
}

// DetachMountsUnder does nothing: only Linux runners mount workspace tmpfs.
func DetachMountsUnder(dir string) error { return nil }

// MountsUnder lists no mount: only Linux runners mount workspace tmpfs.
func MountsUnder(t testing.TB, dir string) []string { return nil }
