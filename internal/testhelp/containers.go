package testhelp

import (
	"os"
	"os/exec"
	"path/filepath"
)

// UsePodmanRunc points CONTAINERS_CONF (when unset) at a file that makes podman run containers with runc
// — crun refuses the hybrid cgroup layouts of the development machines — and with ulimits within the
// host's hard limits (runc cannot raise them without CAP_SYS_RESOURCE). Podman reads it also behind
// podman-docker's `docker` wrapper. It does nothing where podman is absent or the variable is set.
func UsePodmanRunc() {
	if _, err := exec.LookPath("podman"); err != nil || os.Getenv("CONTAINERS_CONF") != "" {
		return
	}
	conf := filepath.Join(os.TempDir(), "codellm-test-containers.conf") // rewritten, never accumulated
	body := "[containers]\ndefault_ulimits = [\"nofile=16384:16384\", \"nproc=16384:16384\"]\n"
	if _, err := exec.LookPath("runc"); err == nil {
		body += "[engine]\nruntime = \"runc\"\n"
	}
	if os.WriteFile(conf, []byte(body), 0o644) == nil {
		os.Setenv("CONTAINERS_CONF", conf)
	}
}
