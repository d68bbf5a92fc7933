package runner

import (
	"os"
	"strings"
	"testing"
)

// TestWorkspaceInodes (red-team item 1): a session kept 300 000 files (+301 k host inodes) and every
// later execute paid a 1.9 s walk of them. Without a workspace bound the files are created; a bounded
// workspace holds one inode per 4 KiB (here 1024 for 4 MiB) and creation stops with ENOSPC.
func TestWorkspaceInodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("WorkspaceSize mounts a tmpfs: needs root")
	}
	prog := `python3 -c '
import os
n = 0
try:
    for i in range(3000): open("f%d" % i, "w").close(); n += 1
    print("created", n)
except OSError as e: print("stopped", n, e.strerror)
'`
	plain := newRunner(t, nil)
	if out := plain.exec("", code("bash", prog)).Run.Stdout; out != "created 3000\n" {
		t.Fatalf("without a bound: %q", out)
	}
	tr := newRunner(t, func(c *Config) { c.WorkspaceSize = 4 << 20 })
	out := tr.exec("many", code("bash", prog)).Run.Stdout
	if !strings.HasPrefix(out, "stopped ") || !strings.Contains(out, "No space left") {
		t.Fatalf("under a 4 MiB workspace: %q", out)
	}
}
