//go:build linux

package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	if mode == "hardened" {
		if err := hardenLikeUnit(); err != nil {
			fmt.Println("SETUP", err)
			return 1
		}
	}
	rep := sandbox.Probe(sandbox.Config{Mode: sandbox.ModeNative})
	fmt.Printf("MISSING=%s\n", strings.Join(rep.Missing, ","))
	return 0
}

// hardenLikeUnit reproduces the mounts of the directives codellm.service does set: PrivateTmp= (a fresh
// /var/tmp; /tmp is left alone only because `go test` runs this binary from there, and the helper must be
// able to re-execute it), ProtectHome= (/home and /root covered), ProtectKernelModules=
// (/usr/lib/modules covered) and ProtectSystem= (/usr and /etc read-only).
func hardenLikeUnit() error {
	for _, d := range []string{"/var/tmp", "/home", "/root"} {
		if _, err := os.Stat(d); err == nil {
			if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
				return fmt.Errorf("tmpfs over %s: %w", d, err)
			}
		}
	}
	if err := os.Chmod("/var/tmp", 0o1777); err != nil {
		return err
	}
	if _, err := os.Stat("/usr/lib/modules"); err == nil {
		if err := unix.Mount("tmpfs", "/usr/lib/modules", "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0000"); err != nil {
			return fmt.Errorf("cover /usr/lib/modules: %w", err)
		}
	}
	for _, d := range []string{"/usr", "/etc"} {
		if err := unix.Mount(d, d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", d, err)
		}
		if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", d, err)
		}
	}
	return nil
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

// The other half of the evidence: the mount-based hardening codellm.service does set (private tmp,
// covered /home, /root and kernel modules, read-only /usr and /etc) leaves every mechanism available.
func TestUnitHardeningKeepsSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a mount namespace and mount over system directories")
	}
	if base := missing(t, "plain"); len(base) > 0 {
		t.Skipf("the native sandbox is incomplete on this host even without hardening (missing %v)", base)
	}
	if got := missing(t, "hardened"); len(got) > 0 {
		t.Fatalf("with the unit's mount hardening the sandbox lacks %v", got)
	}
}

// The identity codellm.service gives the process — an unprivileged uid (DynamicUser=), an empty
// capability bounding set (CapabilityBoundingSet=) and no_new_privs (NoNewPrivileges=) — still builds
// every part of a block's sandbox; only the cgroup needs the unit's Delegate=yes, which a process
// started outside systemd cannot have.
func TestUnitIdentityKeepsSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start the probe as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed")
	}
	if base := missing(t, "plain"); len(base) > 0 {
		t.Skipf("the native sandbox is incomplete on this host even as root (missing %v)", base)
	}
	// The helper re-executes the binary, so uid 65534 must be able to read it: copy it out of the
	// private build directory.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "probe")
	raw, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups",
		"--bounding-set", "-all", "--inh-caps", "-all", "--no-new-privs", bin)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), probeEnv+"=plain")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe as uid 65534: %v\n%s", err, out)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "MISSING="); ok && rest != "" {
			got = strings.Split(rest, ",")
		}
	}
	if !strings.Contains(string(out), "MISSING=") {
		t.Fatalf("probe printed no result:\n%s", out)
	}
	for _, m := range got {
		if m != "cgroup" {
			t.Errorf("as an unprivileged uid without capabilities the sandbox lacks %s (all missing: %v)", m, got)
		}
	}
	t.Logf("missing as uid 65534 with no capabilities and no_new_privs: %v", got)
}
