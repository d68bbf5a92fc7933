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

	"github.com/codellm/codellm/internal/sandbox"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

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
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if strings.HasPrefix(args[0], "-") {
		// trip2g's codellm has no serve subcommand: `codellm -addr … -max-stdout-bytes …` serves.
		return cmdServe(args, stdout, stderr)
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "codellm: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
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
	b.WriteString("\nRun 'codellm COMMAND --help' for a command's flags and every other spelling of each. Settings\n" +
		"also read CODELLM_ variables in upper snake case (--max-output-bytes: CODELLM_MAX_OUTPUT_BYTES;\n" +
		"the hub's CODELLM_HUB_*), and the worker's and hub's LIBRECHAT_CODE_* too; the command line wins.\n")
	io.WriteString(w, b.String())
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "codellm %s\n", version)
	return 0
}
