package sandbox

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/sandbox/hook"
)

// TestA_TmpfsInodesBounded (red-team item 7): the private tmpfs mounts had no nr_inodes, so a block
// created 100 000 empty files freely (bounded only by the memory cgroup). Unprotected the probe creates
// them all (shown on /dev/shm: the host's /tmp may be a slow disk); under the sandbox creation stops
// with ENOSPC at the inode cap, in /tmp, /dev/shm and the workdir alike.
func TestA_TmpfsInodesBounded(t *testing.T) {
	s := nativeSandbox(t)
	lim := &Limits{TmpSize: 4 << 20} // the smallest cap (4096 inodes) keeps the probe short
	capN := hook.TmpfsInodes(lim.TmpSize)
	want := capN + 500
	for _, where := range []string{"/tmp", "/dev/shm", "."} {
		t.Run(where, func(t *testing.T) {
			dir := where
			if where == "/tmp" || where == "/dev/shm" {
				// Unprotected, /tmp is the host's: use a private directory under it.
				dir = where + "/codellm-inodes-" + fmt.Sprint(os.Getpid())
			}
			script := fmt.Sprintf(`
import os, errno, shutil
d = %q
os.makedirs(d, exist_ok=True)
n = 0
try:
    for i in range(%d):
        open(os.path.join(d, str(i)), "w").close(); n += 1
    print("`+probeOK+`", n)
except OSError as e:
    print("stopped", n, errno.errorcode.get(e.errno))
finally:
    if d != ".": shutil.rmtree(d, ignore_errors=True)
`, dir, want)
			var on outcome
			if where == "/dev/shm" {
				// The unprotected side runs on the host's /dev/shm (a tmpfs, so this stays quick).
				_, on = differential(t, offSandbox(t), s, lim, py(script))
			} else {
				var err error
				if on, err = runIn(t, s, "", lim, py(script)...); err != nil {
					t.Fatal(err)
				}
			}
			if !strings.Contains(on.Stdout, "stopped") || !strings.Contains(on.Stdout, "ENOSPC") {
				t.Fatalf("want ENOSPC at the inode cap (%d), got %q %q", capN, on.Stdout, on.Stderr)
			}
		})
	}
}

// TestD_HostProcFilesMasked (red-team item 7): /proc/cmdline and the host's boot_id were readable in the
// sandbox. Unprotected the probe reads the host's values; under the sandbox they read empty, as do the
// host-wide timer and scheduler dumps.
func TestD_HostProcFilesMasked(t *testing.T) {
	s := nativeSandbox(t)
	for _, p := range hook.ProcMasked {
		if _, err := os.Stat("/proc/" + p); err != nil {
			t.Logf("/proc/%s: not on this kernel", p)
			continue
		}
		t.Run(p, func(t *testing.T) {
			probe := py(fmt.Sprintf(`
try:
    b = open("/proc/%s", "rb").read(4096)
except OSError as e:
    print("unreadable", e); raise SystemExit
print(len(b))
if b: print("`+probeOK+`")
`, p))
			off, err := runIn(t, offSandbox(t), "", nil, probe...)
			if err != nil {
				t.Fatal(err)
			}
			on, err := runIn(t, s, "", nil, probe...)
			if err != nil {
				t.Fatal(err)
			}
			if worked(on) {
				t.Fatalf("/proc/%s shows host data in the sandbox: %q", p, on.Stdout)
			}
			if !worked(off) {
				t.Logf("/proc/%s is empty or unreadable even unprotected here: %q", p, off.Stdout)
			}
		})
	}
}
