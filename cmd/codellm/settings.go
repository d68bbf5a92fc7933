package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bytesize"
	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/debugger"
	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/sealform"
	"github.com/codellm/codellm/internal/server"
	"github.com/codellm/codellm/internal/workspace"
)

// The settings tables of the commands (internal/config): flags, every environment spelling, --help and
// docs/operator.md all come from these rows.

// trip2g's names for three of our settings: its deployments start codellm unchanged (docs/fleet.md §6.4).
var (
	trip2gAddr      = config.Alias{Flag: "addr", Env: "CODELLM_ADDR", Family: "trip2g"}
	trip2gMaxStdout = config.Alias{Flag: "max-stdout-bytes", Env: "CODELLM_MAX_STDOUT_BYTES", Family: "trip2g", Unset: "0"} // its 0: its default, also ours
	trip2gNetwork   = config.Alias{Flag: "sandbox-network", Env: "CODELLM_SANDBOX_NETWORK", Family: "trip2g"}
	trip2gMetrics   = config.Alias{Flag: "metrics-addr", Env: "CODELLM_METRICS_ADDR", Family: "trip2g"}
)

func sizeDefault(n int64) string { return bytesize.Format(n) }
func durDefault(d time.Duration) string {
	// "5m0s" reads better as "5m", "1h0m0s" as "1h"; both parse back to the same duration.
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
func intDefault(n int) string { return strconv.Itoa(n) }
func noEmptyPrefix(v string) error {
	if v == "" {
		return errors.New("an empty prefix would expose the whole environment")
	}
	return nil
}

// execSettings are the execution settings shared by serve, run, debug, blocks, doctor and worker run.
func execSettings() []config.Setting {
	return []config.Setting{
		{Name: "allowed-programs", Kind: config.String, EmptyIsValue: true, Usage: "comma-separated canonical program names to enable (absent: every installed interpreter; empty: execution disabled)"},
		{Name: "interpreters", Kind: config.String, Usage: "JSON file replacing the embedded interpreter registry"},
		{Name: "sandbox", Kind: config.String, Default: "native", NoFamilies: true, Usage: "sandbox mode: native (every mechanism or refuse), besteffort, off"},
		{Name: "network", Kind: config.Bool, Aliases: []config.Alias{trip2gNetwork}, Usage: "give blocks network access (default: an empty network namespace)"},
		{Name: "network-allow", Kind: config.String, Usage: "comma-separated host names, *.suffix wildcards, IPs or CIDRs blocks may reach through codellm's filtering egress proxy (default: none)"},
		{Name: "network-max-connections", Kind: config.Int, Default: intDefault(egress.DefaultMaxConns), Usage: "egress connections per run (with --network-allow)"},
		{Name: "network-max-bytes", Kind: config.Size, Default: sizeDefault(egress.DefaultMaxBytes), Usage: "egress bytes per run, both directions, request and response heads included (with --network-allow)"},
		{Name: "network-max-proxy-connections", Kind: config.Int, Default: intDefault(egress.DefaultMaxOpen), Usage: "connections a run's blocks may hold open to the egress proxy at once, dialled or not; more are closed at once (with --network-allow)"},
		{Name: "go-helper", Kind: config.Bool, Usage: "give every block the Go helper (a re-exec of codellm) instead of the raw helper the spawner forks where a block allows it; as confined, slower (for comparisons, and to rule the raw helper out)"},
		{Name: "deterministic", Kind: config.Bool, Usage: "run every block reproducibly: fixed clock, seeded randomness, ASLR off (requests may turn it off or pick metadata.seed/now; needs the native sandbox and libfaketime)"},
		{Name: "timeout", Kind: config.Duration, Default: durDefault(300 * time.Second), Usage: "whole-run timeout (requests may lower it)"},
		{Name: "max-output-bytes", Kind: config.Size, Default: sizeDefault(10 << 20), Aliases: []config.Alias{trip2gMaxStdout}, Usage: "cap on captured stdout per block"},
		{Name: "max-stderr-bytes", Kind: config.Size, Default: sizeDefault(64 << 10), Usage: "captured stderr per block; the last bytes are kept"},
		{Name: "max-blocks", Kind: config.Int, Default: "64", Usage: "maximum code blocks per request"},
		{Name: "max-concurrent", Kind: config.Int, Usage: "maximum concurrent runs (default: 2 × CPUs)"},
		{Name: "queue-timeout", Kind: config.Duration, Default: durDefault(30 * time.Second), Usage: "how long a run waits for a slot before 429"},
		{Name: "expose-env", Kind: config.List, Usage: "expose this variable of codellm's environment to every block (repeatable, comma-separated)"},
		{Name: "expose-env-prefix", Kind: config.List, Check: noEmptyPrefix, Usage: "expose variables with this prefix (repeatable, comma-separated; CODELLM_* never)"},
		{Name: "memory-limit", Kind: config.Size, Default: sizeDefault(sandbox.DefaultMemory), Usage: "memory limit per run, all blocks together, swap included"},
		{Name: "pids-limit", Kind: config.Int, Default: intDefault(sandbox.DefaultPids), Usage: "maximum tasks (processes and threads) per run"},
		{Name: "cpu-time-limit", Kind: config.Duration, Default: "0s", Usage: "CPU time limit per process (RLIMIT_CPU backstop; 0: only the wall-clock timeout)"},
		{Name: "tmp-size", Kind: config.Size, Default: sizeDefault(sandbox.DefaultTmpSize), Usage: "size of each block's private scratch filesystems"},
		{Name: "work-dir", Kind: config.String, Usage: "parent directory of per-run workdirs (default: the system temp dir); serve and worker, as root, keep them on a private tmpfs below it"},
		{Name: "packages-dir", Kind: config.String, Usage: "directory of the operator's package sets (codellm packages add): every block imports them, read-only; listed by /api/v2/packages"},
		{Name: "log-format", Kind: config.String, Default: "text", Usage: "log format: text or json"},
		{Name: "log-level", Kind: config.String, Default: "info", Usage: "log level: debug, info, warn, error"},
	}
}

// serveSettings are serve's own settings beside the execution ones.
func serveSettings() []config.Setting {
	return []config.Setting{
		{Name: "listen", Kind: config.String, Default: "127.0.0.1:8080", Aliases: []config.Alias{trip2gAddr}, Usage: "listen address (non-loopback needs --api-key, --client-ca or --insecure-public)"},
		{Name: "api-key", Kind: config.String, Secret: true, Usage: "require Authorization: Bearer <key> (prefer CODELLM_API_KEY: flags show in process listings)"},
		{Name: "tls-cert", Kind: config.String, Usage: "TLS certificate file (serve HTTPS)"},
		{Name: "tls-key", Kind: config.String, Usage: "TLS private key file"},
		{Name: "client-ca", Kind: config.String, Usage: "CA file: require client certificates signed by it (mutual TLS)"},
		{Name: "insecure-public", Kind: config.Bool, Usage: "allow a non-loopback listener without authentication (logged as a warning)"},
		{Name: "debug-extension", Kind: config.Bool, Usage: "honour the x_codellm_debug request field (exposes block output to callers)"},
		{Name: "metrics-listen", Kind: config.String, Default: server.DefaultMetricsListen, EmptyIsValue: true, Aliases: []config.Alias{trip2gMetrics},
			Usage: "address of the internal listener: GET /metrics without the API key, pprof and probes (loopback: open; otherwise it needs --api-key or --client-ca; empty: off)"},
		{Name: "trip2g-url", Kind: config.String,
			Usage: "trip2g's browser cookie lane (its delegated-admin check): codellm has none, so the value is accepted, logged and ignored; requests authenticate with the API key or a client certificate"},
		{Name: "seal-path", Kind: config.String, Default: sealform.DefaultPath, Check: sealform.CheckPath,
			Usage: "path of the sealing form, on the main listener (behind its authentication) and on --debug-listen (trip2g's CODELLM_SEAL_PATH)"},
		{Name: "max-body-bytes", Kind: config.Size, Default: sizeDefault(10 << 20), Usage: "maximum request body"},
		{Name: "idempotency-ttl", Kind: config.Duration, Default: durDefault(10 * time.Minute), Usage: "how long a response to an Idempotency-Key (or a Stainless client retry) is replayed; 0 disables the rule"},
		{Name: "idempotency-max-entries", Kind: config.Int, Default: "10000", Usage: "recorded responses kept at most (oldest out first)"},
		{Name: "idempotency-max-bytes", Kind: config.Size, Default: sizeDefault(64 << 20), Usage: "bytes of recorded responses kept at most (oldest out first)"},
		{Name: "responses-ttl", Kind: config.Duration, Default: durDefault(time.Hour), Usage: "how long a stored Responses API response (retrieve, previous_response_id, background) is kept"},
		{Name: "responses-max-entries", Kind: config.Int, Default: "10000", Usage: "stored Responses API responses kept at most, all credentials together (oldest out first)"},
		{Name: "responses-max-bytes", Kind: config.Size, Default: sizeDefault(64 << 20), Usage: "bytes of stored Responses API responses kept at most (oldest out first)"},
		{Name: "allowed-hosts", Kind: config.List, Usage: "extra Host names the listener answers to (comma-separated; loopback names are always allowed on a loopback listener)"},
		{Name: "allowed-origins", Kind: config.List, Usage: "browser origins allowed to call the service (comma-separated, e.g. https://app.example); its own origin always is"},
		{Name: "max-connections", Kind: config.Int, Default: intDefault(httpguard.DefaultMaxConns), Usage: "open connections; more are answered 503 connection_limit (negative: no cap)"},
		{Name: "body-timeout", Kind: config.Duration, Default: durDefault(httpguard.DefaultBody), Usage: "time a request body has to arrive (negative: none)"},
		{Name: "idle-timeout", Kind: config.Duration, Default: durDefault(httpguard.DefaultIdle), Usage: "idle keep-alive connections are closed after this (negative: never)"},
		{Name: "runner-session-ttl", Kind: config.Duration, Default: durDefault(30 * time.Minute), Usage: "idle time after which a runner API session (X-Runtime-Session-Id) is deleted"},
		{Name: "runner-max-sessions", Kind: config.Int, Default: "64", Usage: "maximum live runner API sessions"},
		{Name: "runner-max-sessions-per-credential", Kind: config.Int, Default: "0", Usage: "live runner sessions per API key or client certificate (0: half of --runner-max-sessions); at the cap the credential's least recently used session idle for --runner-session-evict-idle is replaced, else 429 (a worker counts each hub tenant as one credential)"},
		{Name: "runner-session-evict-idle", Kind: config.Duration, Default: durDefault(runner.DefaultEvictIdle), Usage: "a full session table (or a credential's full share) evicts the least recently used session idle this long instead of refusing new ones"},
		{Name: "runner-workspace-size", Kind: config.Size, Default: sizeDefault(defaultWorkspaceSize), Usage: "bound each runner API workspace to this size, one inode per 4 KiB (a tmpfs mounted on it as root, else the sandbox's private tmpfs, copied back for sessions; 0: plain directories bounded per file)"},
		{Name: "external-workspace", Env: workspace.EnvRouteEnabled, EnvExact: true, EnvOnly: true, Kind: config.Bool,
			Usage: "serve the runtime command route (bridge-protocol §11.4); set by the worker's docker-nsjail supervisor in its command container only"},
		{Name: "external-workspace-root", Env: workspace.EnvRouteRoot, EnvExact: true, EnvOnly: true, Kind: config.String,
			Usage: "the runtime command route's workspace root"},
		{Name: "external-workspace-token", Env: workspace.EnvRouteToken, EnvExact: true, EnvOnly: true, Kind: config.String, Secret: true,
			Usage: "the runtime command route's token (at least 32 bytes; removed from codellm's environment once read)"},
	}
}

// debugSettings are serve's settings of the step debugger.
func debugSettings() []config.Setting {
	return []config.Setting{
		{Name: "debug-listen", Kind: config.String, Usage: "loopback address of the step debugger (empty: off)"},
		{Name: "debug-max-sessions", Kind: config.Int, Default: intDefault(debugger.DefaultMaxSessions), Usage: "maximum open step sessions of the debugger"},
		{Name: "debug-session-ttl", Kind: config.Duration, Default: durDefault(debugger.DefaultSessionTTL), Usage: "idle time after which a step session expires"},
	}
}

// inputSetting is run's and debug's --input.
var inputSetting = config.Setting{Name: "input", Kind: config.String, Usage: "JSON file with the fleet_input bag (written to $FLEET_INPUT; default {})"}

// workerSettings are every worker subcommand's settings (bridge-protocol §12).
func workerSettings() []config.Setting {
	return []config.Setting{
		{Name: "url", Kind: config.String, Usage: "hub base URL, e.g. https://hub.example.com/v1 (default: the identity's URL)"},
		{Name: "worker-id", Kind: config.String, Usage: "worker ID (default: the identity's)"},
		{Name: "worker-token", Kind: config.String, Secret: true, Usage: "static worker token: selects static mode (development)"},
		{Name: "identity", Env: "IDENTITY_FILE", Kind: config.String, Usage: "identity file (default ~/.config/codellm/worker/<id>.json)",
			Aliases: []config.Alias{{Env: "CODELLM_IDENTITY", Family: "codellm"}, {Env: "LIBRECHAT_CODE_IDENTITY", Family: "LibreChat"}}},
		{Name: "worker-dir", Kind: config.String, Usage: "register this directory as a workspace"},
		{Name: "default-workspace", Kind: config.Bool, Usage: "register codellm's default workspace directory"},
		{Name: "workspace-id", Kind: config.String, Default: "primary", Usage: "workspace ID"},
		{Name: "workspace-quarantine-file", Kind: config.String, Usage: "mutation quarantine marker path (default under ~/.local/state/codellm/worker)"},
	}
}

// containerCLI is the docker supervisors' CLI, for worker run and reset-workspace.
var containerCLI = config.Setting{Name: "container-cli", Kind: config.String, Default: "docker", Usage: "docker-compatible CLI of the docker supervisors (podman works)"}

// workerRunSettings are worker run's own settings beside workerSettings and the execution ones.
func workerRunSettings() []config.Setting {
	return append([]config.Setting{
		{Name: "runtime-supervisor", Kind: config.String, Usage: "embedded (default), endpoint, docker, docker-nsjail (alias docker-macos-nsjail)"},
		containerCLI,
		{Name: "runtime-image", Kind: config.String, Usage: "runtime image of the docker supervisors"},
		{Name: "docker-seccomp-profile", Kind: config.String, Usage: "absolute path of the containers' seccomp profile (required for docker-nsjail)"},
		{Name: "docker-packages-path", Kind: config.String, Usage: "directory mounted read-only at /pkgs (required for docker-nsjail)"},
		{Name: "container-sandbox", Kind: config.String, Usage: "codellm's sandbox mode inside the runtime container: native or besteffort (required for docker; an explicit choice)"},
		{Name: "container-memory-limit", Kind: config.Size, Default: "0", Usage: "memory of each runtime container of the docker supervisors, swap included (0: --memory-limit plus 256 MiB for its runner)"},
		{Name: "container-pids-limit", Kind: config.Int, Default: "0", Usage: "tasks of each runtime container of the docker supervisors (0: --pids-limit plus 64 for its runner)"},
		{Name: "container-session-ttl", Kind: config.Duration, Default: "30m", Usage: "idle time after which the docker supervisors remove a session's runtime container"},
		{Name: "container-max-sessions", Kind: config.Int, Default: "64", Usage: "session runtime containers at once; at the bound the least recently used one idle 5 minutes is removed for a new one, else 429"},
		{Name: "sandbox-endpoint", Kind: config.String, Usage: "loopback runner URL for the endpoint supervisor (may contain {runtimeSessionId})"},
		{Name: "stateful-workspace", Kind: config.Bool, Usage: "give each runtime session a persistent workspace"},
		{Name: "allow-remote-endpoint", Kind: config.Bool, Usage: "allow a non-loopback sandbox endpoint"},
		{Name: "sandbox-profile", Kind: config.String, Usage: "sandboxProfile capability label"},
		{Name: "runtimes", Kind: config.String, Usage: "comma-separated runtime labels (default: the enabled programs and the chat label)"},
		{Name: "policy", Kind: config.String, Default: "default-deny", Usage: "policy text hashed into policyDigest"},
		{Name: "workspace-name", Kind: config.String, Usage: "workspace display name (default: the directory's basename)"},
		{Name: "allow-workspace-writes", Kind: config.Bool, Usage: "enable write_file, edit_file and preview_edit"},
		{Name: "allow-workspace-commands", Kind: config.Bool, Usage: "enable execute_command (in codellm's sandbox)"},
		{Name: "command-sandbox", Kind: config.String, Usage: "command sandbox: embedded (native-srt is an alias) or runtime (docker-nsjail's runtime container; the default there)"},
		{Name: "command-allowed-domains", Kind: config.String, Usage: "destinations workspace commands may reach through codellm's egress proxy: names, *.suffix, IPs, CIDRs (normalised into the policy digest)"},
		{Name: "require-ready", Kind: config.Bool, Usage: "set requiresReadyConfirmation"},
		{Name: "lease-wait", Kind: config.Duration, Default: "25s", Usage: "long-poll wait per lease (at most 30s)"},
		{Name: "workspace-lease-slots", Kind: config.Int, Default: "1", Usage: "assignments run at once, one lease slot each (LibreChat's lease slots; granted by the hub; 1 with a writable or command workspace)"},
		{Name: "metrics-listen", Kind: config.String, Usage: "loopback address serving GET /metrics and /readyz (empty: no inbound port)"},
	}, workerRelaySettings()...)
}

// referenceSection is one command's part of docs/operator.md's generated settings reference.
type referenceSection struct {
	title    string
	fs       *flag.FlagSet
	families []config.Family // nil: the command's (families)
}

// settingsReference is every command's FlagSet as the command builds it, for the reference.
func settingsReference() []referenceSection {
	serve, _, _ := serveFlagSet(io.Discard)
	local := newFlagSet("run", "run", io.Discard)
	(&execFlags{}).register(local)
	register(local, []config.Setting{inputSetting,
		{Name: "changes", Kind: config.Bool, Usage: "run: print the raw {changes, answer} output instead of tool calls"},
		{Name: "editor", Kind: config.String, Usage: "debug: command that edits the pipe buffer (default $VISUAL, then $EDITOR, then vi)"},
		{Name: "json", Kind: config.Bool, Usage: "blocks, doctor: print JSON"}}, nil)
	hubServe, hubAdmin, hubFamilies := hub.SettingsReference()
	ws := newFlagSet("workspace", "workspace", io.Discard)
	register(ws, workspace.CLISettings(), nil)
	worker := newFlagSet("worker run", "worker run", io.Discard)
	(&workerFlags{}).register(worker, true)
	(&execFlags{}).register(worker)
	relay := newFlagSet("worker relay", "worker relay", io.Discard)
	register(relay, relaySettings(), nil)
	return []referenceSection{
		{"`codellm serve`", serve, nil},
		{"`codellm run`, `debug`, `blocks`, `doctor` (the execution settings of serve, plus their own)", local, nil},
		{"`codellm worker` (`run`; `pair`, `reset-workspace` and `clear-workspace-quarantine` take the first eight)", worker, nil},
		{"`codellm worker relay` (the file relay alone)", relay, nil},
		{"`codellm workspace` (command line only: each is a per-call opt-in)", ws, nil},
		{"`codellm hub serve`", hubServe, hubFamilies},
		{"`codellm hub pair|revoke|status`", hubAdmin, hubFamilies},
	}
}

// writeSettingsReference writes the generated reference (docs/operator.md §9).
func writeSettingsReference(w io.Writer) {
	for _, s := range settingsReference() {
		fmt.Fprintf(w, "\n### %s\n\n", s.title)
		fams := s.families
		if fams == nil {
			fams = families(s.fs)
		}
		config.Markdown(w, s.fs, fams)
	}
}
