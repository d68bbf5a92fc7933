package sandbox

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestMountAtHidesHostPath: with MountAt the program's working directory, $PWD and a traceback show the
// neutral path, and neither the host workdir nor its name appears anywhere the program can read about
// itself; without MountAt (the differential half) the host path is visible.
func TestMountAtHidesHostPath(t *testing.T) {
	s := nativeSandbox(t)
	script := "import os, traceback\nprint(os.getcwd())\nprint(os.environ.get('PWD', ''))\nprint(open('/proc/self/mountinfo').read())\nprint(open('/proc/self/cmdline').read())\nraise SystemExit(traceback.format_stack()[-1])\n"
	for _, persist := range []bool{false, true} {
		dir := workdir(t, map[string]string{"main.py": script})
		if persist {
			os.Chmod(dir, 0o755)
		}
		run := func(mountAt string) string {
			r, err := s.NewRun(nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			in := r.Workdir(dir, mountAt)
			return startOutput(t, r, Spec{Path: "/usr/bin/python3", Args: []string{"python3", in + "/main.py"},
				Env: append(stdEnv(in), "PWD="+in), Dir: dir, MountAt: mountAt, Persist: persist})
		}
		got := run("/mnt/data")
		if !strings.HasPrefix(got, "/mnt/data\n/mnt/data\n") || !strings.Contains(got, `File "/mnt/data/main.py"`) {
			t.Fatalf("persist=%v: want /mnt/data as cwd, $PWD and in the traceback, got:\n%s", persist, got)
		}
		visible := got
		if persist {
			// A bind mount's mountinfo line names its source directory relative to the source filesystem's
			// root; only a workdir that is a filesystem of its own (the runner's --runner-workspace-size)
			// hides it. Everything else must not show the host path.
			visible = strings.Join(slices.DeleteFunc(strings.Split(got, "\n"), func(l string) bool {
				return strings.Contains(l, " /mnt/data rw,")
			}), "\n")
		}
		if strings.Contains(visible, dir) {
			t.Fatalf("persist=%v: host workdir %s visible inside:\n%s", persist, dir, got)
		}
		if old := run(""); !strings.Contains(old, dir) {
			t.Fatalf("persist=%v: without MountAt the host path should show (differential), got:\n%s", persist, old)
		}
	}
}

func TestMountAtValidated(t *testing.T) {
	for _, bad := range []string{"mnt", "/", "/mnt/../etc", "/usr/x", "/proc", "/tmp/a", "/mnt/data/"} {
		if err := checkMountAt(bad); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%q: %v, want ErrInvalidSpec", bad, err)
		}
	}
	if err := checkMountAt("/mnt/data"); err != nil {
		t.Fatal(err)
	}
}
