// Command codellm runs untrusted code safely for AI-agent systems: an OpenAI-compatible endpoint that
// runs the fenced code blocks of a conversation in per-block Linux sandboxes and answers with tool calls,
// plus a local runner, a step debugger, workspace tools, and a bridge worker and hub.
//
// main gives the sandbox child hook its chance before anything else: when codellm re-executes itself as a
// sandbox helper, the hook confines the process and execs the interpreter, and never returns.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/sandbox"
)

type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() map[string]command {
	return map[string]command{
		"serve":     {"run the HTTP service (OpenAI-compatible /v1/chat/completions)", cmdServe},
		"run":       {"run a markdown body locally and print the tool calls as JSON", cmdRun},
		"debug":     {"step a markdown body block by block in the terminal, editing the pipe buffer", cmdDebug},
		"blocks":    {"list a markdown body's blocks with their resolved programs", cmdBlocks},
		"doctor":    {"probe the host's sandbox mechanisms and print a table", cmdDoctor},
		"workspace": {"run one workspace tool operation on a directory (request JSON on stdin)", cmdWorkspace},
		"version":   {"print the version", cmdVersion},
		"worker":    {"run a bridge worker: pair, run, reset-workspace, clear-workspace-quarantine", cmdWorker},
		"hub":       {"run the bridge hub or call its admin routes: serve, pair, revoke, status", cmdHub},
		"seal":      {"seal a secret for a role's frontmatter (plaintext on stdin, blob on stdout; key from SEAL_KEY)", cmdSeal},
		"packages":  {"the operator's package sets blocks import: add (pip or npm, on this host), list, remove", cmdPackages},
	}
}

func main() {
	sandbox.Main()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 && os.Getenv(trip2gAddr.Env) != "" {
		// trip2g's codellm serves with no arguments; CODELLM_ADDR (trip2gAddr, the settings table's alias)
		// is its name only, so its deployments (environment only, no command) start the service here too.
		return cmdServe(nil, stdout, stderr)
	}
	if len(args) == 0 || isHelp(args[0]) {
		usage(stderr, cmds)
		if len(args) == 0 {
			return config.ExitUsage
		}
		return config.ExitOK
	}
	if strings.HasPrefix(args[0], "-") {
		// trip2g's codellm has no serve subcommand: `codellm -addr … -max-stdout-bytes …` serves.
		return cmdServe(args, stdout, stderr)
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "codellm: unknown command %q\nsee 'codellm --help'\n", args[0])
		return config.ExitUsage
	}
	return c.run(args[1:], stdout, stderr)
}

// isHelp reports whether a is a request for help in place of a subcommand.
func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

// subcommand is one line of a command's list of subcommands (hub, worker).
type subcommand struct{ name, args, summary string }

// writeSubcommands writes a command's usage line and its subcommands.
func writeSubcommands(w io.Writer, name string, subs []subcommand) {
	fmt.Fprintf(w, "Usage: codellm %s COMMAND [flags]\n\nCommands:\n", name)
	for _, s := range subs {
		fmt.Fprintf(w, "  %s %s\n      %s\n", s.name, s.args, s.summary)
	}
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("Usage: codellm COMMAND [flags]\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\nRun 'codellm COMMAND --help' for a command's flags and every other spelling of each. Flags may\n" +
		"come before or after a command's arguments. Settings also read CODELLM_ variables in upper snake case\n" +
		"(--max-output-bytes: CODELLM_MAX_OUTPUT_BYTES; the hub's CODELLM_HUB_*), and the worker's and hub's\n" +
		"LIBRECHAT_CODE_* too; the command line wins.\n" + exitCodesHelp)
	io.WriteString(w, b.String())
}

// exitCodesHelp is the exit codes' part of `codellm --help` (config's Exit* constants).
const exitCodesHelp = `
Exit codes: 0 success; 1 the work failed (a block, the output, a remote refusal); 2 the command line or a
setting (see the command's --help); 3, 4, 5 the worker's authentication, fencing, quarantine; 6 this host
cannot do what the settings ask (a sandbox mechanism, the listen address).
`
