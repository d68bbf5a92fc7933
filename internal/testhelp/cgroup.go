package testhelp

import (
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// CgroupsOf lists the cgroup directories a codellm process with this pid made (codellm-<pid>-...), in
// every hierarchy under /sys/fs/cgroup, down to the depth a nested service's cgroup sits at (v1 memory
// groups may be a few levels down). None on a host without cgroups.
func CgroupsOf(t testing.TB, pid int) []string {
	t.Helper()
	prefix := "codellm-" + strconv.Itoa(pid) + "-"
	var found []string
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), prefix) {
			found = append(found, path)
			return filepath.SkipDir
		}
		if strings.Count(path, "/") > 8 {
			return filepath.SkipDir
		}
		return nil
	})
	return found
}
