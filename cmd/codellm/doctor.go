package main

import (
	"fmt"
	"io"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/sandbox"
)

// cmdDoctor probes the host and prints each sandbox mechanism; it exits ExitUnavailable (6) when the
// configured mode cannot run here, so it can gate a deployment.
func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	ef, _, v, code := localCommand("doctor", "doctor [flags]", args, stderr,
		config.Setting{Name: "json", Kind: config.Bool, Usage: "print the report as JSON (the object /readyz carries as its mechanisms member)"})
	if code >= 0 {
		return code
	}
	log, err := ef.logger(stderr)
	if err != nil {
		return config.UsageError(stderr, "doctor", err)
	}
	scfg, err := ef.sandboxConfig(log)
	if err != nil {
		return config.UsageError(stderr, "doctor", err)
	}
	rep := sandbox.Probe(scfg)
	rep.Protections = append(rep.Protections, serviceProtections()...)
	if cgoBuild && scfg.Mode == sandbox.ModeNative {
		rep.Ready, rep.Missing = false, append(rep.Missing, "static build")
		rep.Warnings = append(rep.Warnings, errCgoBuild.Error())
	}
	if v.Bool("json") {
		writeJSON(stdout, rep)
	} else {
		rep.WriteTable(stdout)
	}
	if !rep.Ready {
		fmt.Fprintf(stderr, "codellm doctor: sandbox mode %q cannot run on this host: missing %v\n", scfg.Mode, rep.Missing)
		return config.ExitUnavailable
	}
	return 0
}

// serviceProtections are the main listener's and the runner's hardening defaults (issue 14), reported by
// doctor beside the sandbox's own.
func serviceProtections() []string {
	return []string{
		"listener Host: a loopback listener answers only localhost/loopback IPs and --allowed-hosts (403 bad_host, DNS rebinding)",
		"listener Origin: a browser Origin other than the service's own or --allowed-origins is refused (403 bad_origin)",
		"listener bodies: POST/PUT/PATCH need Content-Type: application/json (415; no CORS-simple forms)",
		fmt.Sprintf("listener limits: headers %s, body %s (--body-timeout), idle %s (--idle-timeout), %d connections (--max-connections; 503 beyond), EMFILE answered 503 descriptors_exhausted",
			httpguard.DefaultReadHeader, httpguard.DefaultBody, httpguard.DefaultIdle, httpguard.DefaultMaxConns),
		fmt.Sprintf("runner sessions: %d live, half of them per credential, idle ones evicted after %s when full (--runner-max-sessions, --runner-max-sessions-per-credential, --runner-session-evict-idle)",
			runner.DefaultMaxSessions, runner.DefaultEvictIdle),
		"runner args/env_vars: each string at most 131071 bytes (MAX_ARG_STRLEN), args 512 KiB, env_vars 1 MiB (400, never E2BIG)",
		"runner workspaces: at most --runner-workspace-size (256 MiB) and one inode per 4 KiB: a tmpfs mounted on each as root, else the sandbox's private tmpfs (copied in, collected through /proc/<init>/root without following symlinks, copied back whole for sessions); 0, or a sandbox without its own root: host directories bounded per file",
		"workspace tools: multiply-linked files refused; ~/.config/codellm and ~/.local/state/codellm protected from every root",
		"stale run directories of dead servers are removed at start",
	}
}
