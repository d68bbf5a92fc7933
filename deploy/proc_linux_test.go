//go:build linux

package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/sandbox"
)

// probeEnv makes the test binary a probe: it optionally covers /proc/sys with a read-only bind mount —
// exactly what systemd's ProtectKernelTunables= does — then prints which sandbox mechanisms are missing.
const probeEnv = "CODELLM_DEPLOY_PROBE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(probeEnv); mode != "" {
		os.Exit(probe(mode))
	}
	os.Exit(m.Run())
}

func probe(mode string) int {
	if mode == "overmount" {
		if err := unix.Mount("/proc/sys", "/proc/sys", "", unix.MS_BIND, ""); err != nil {
			fmt.Println("SETUP", err)
			return 1
		}
		if err := unix.Mount("", "/proc/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			fmt.Println("SETUP", err)
			return 1
		}
	}
	rep := sandbox.Probe(sandbox.Config{Mode: sandbox.ModeNative})
	fmt.Printf("MISSING=%s\n", strings.Join(rep.Missing, ","))
	return 0
}

// missing runs the probe in a private mount namespace and returns the mechanisms it reports missing.
func missing(t *testing.T, mode string) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), probeEnv+"="+mode)
	// Go makes the new mount namespace's propagation private, so the overmount never reaches the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe %s: %v\n%s", mode, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "MISSING="); ok {
			if rest == "" {
				return nil
			}
			return strings.Split(rest, ",")
		}
	}
	t.Fatalf("probe %s printed no result:\n%s", mode, out)
	return nil
}

// Differential evidence for what codellm.service leaves out: with /proc as the host has it the sandbox
// can build a block's root filesystem; with /proc/sys covered the way ProtectKernelTunables= covers it,
// the kernel refuses the fresh /proc mount and native mode loses rootfs (and would refuse every run).
func TestProcOvermountBreaksSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a mount namespace and bind-mount over /proc/sys")
	}
	base := missing(t, "plain")
	for _, m := range base {
		if m == "rootfs" || m == "userns" || m == "mountns" || m == "helper" {
			t.Skipf("this host cannot build a sandbox root even with an intact /proc (missing %v)", base)
		}
	}
	covered := missing(t, "overmount")
	t.Logf("missing with /proc intact: %v; with /proc/sys covered: %v", base, covered)
	found := false
	for _, m := range covered {
		found = found || m == "rootfs"
	}
	if !found {
		t.Fatalf("with /proc/sys overmounted the sandbox still reports rootfs available (missing %v): the unit's rationale for omitting ProtectKernelTunables= is wrong", covered)
	}
}
