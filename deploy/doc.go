// Package deploy holds codellm's deployment artefacts — the Kubernetes manifests in kubernetes/, the
// systemd units in systemd/ and (at the repository root) the Dockerfile — and, in its tests, the checks
// that those artefacts keep codellm's isolation promises: no privileged pod, no privilege escalation, no
// added capability, default-deny egress, probes on /healthz and /readyz, and units that still give the
// native sandbox the user namespaces, mounts and delegated cgroup it needs. No container engine runs
// where the tests run, so the promises are checked on the parsed files themselves, `systemd-analyze
// verify` checks the units where installed, and (as root) the sandbox's own probe runs under the mount
// and identity restrictions the units set — and under one they deliberately leave out — to show which
// hardening the sandbox tolerates.
package deploy
