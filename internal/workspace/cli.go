package workspace

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// cliSettings are RunCLI's flags (internal/config's table). They are command line only, as they always
// were: each is a per-call opt-in that an inherited environment must not turn on.
var cliSettings = []config.Setting{
	{Name: "root", Kind: config.String, FlagOnly: true, Usage: "workspace root directory (required)"},
	{Name: "allow-writes", Kind: config.Bool, FlagOnly: true, Usage: "enable write_file, edit_file and preview_edit"},
	{Name: "allow-commands", Kind: config.Bool, FlagOnly: true, Usage: "enable execute_command (runs only inside codellm's sandbox)"},
	{Name: "sandbox", Kind: config.String, FlagOnly: true, Default: "native", Usage: "command sandbox mode: native, besteffort, or off (unconfined; explicit opt-in)"},
}

// CLISettings are RunCLI's settings, for docs/operator.md's generated reference.
func CLISettings() []config.Setting { return cliSettings }

// maxCLIRequest bounds the request read from stdin: 1 MiB of content can take 6 MiB once JSON-escaped.
const maxCLIRequest = 16 << 20

// RunCLI implements `codellm workspace --root DIR [--allow-writes] [--allow-commands] [--sandbox MODE] OPERATION`,
// a local front end for people and tests. args are the arguments after "workspace". It reads the §9.2 request
// (without protocolVersion and workspaceId) from stdin and prints the result JSON on stdout. On failure it
// prints {"error": "…", "errorCode": "…"} on stdout and exits 1; usage errors exit 2 with a message on stderr.
//
// cmd/codellm wires it as: case "workspace": os.Exit(workspace.RunCLI(os.Args[2:], os.Stdin, os.Stdout, os.Stderr)).
func RunCLI(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("workspace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	(&config.Set{Settings: cliSettings}).Register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: codellm workspace --root DIR [--allow-writes] [--allow-commands] [--sandbox MODE] OPERATION")
		fmt.Fprintln(stderr, "operations: read_file search_text list_files write_file edit_file preview_edit execute_command")
		fmt.Fprintln(stderr, "The request JSON is read from stdin; the result JSON is printed on stdout.")
		config.Usage(stderr, fs, nil)
	}
	v, code := config.Parse(fs, args, nil, os.LookupEnv)
	if code >= 0 {
		return code
	}
	root, writes, commands, sbMode := v.String("root"), v.Bool("allow-writes"), v.Bool("allow-commands"), v.String("sandbox")
	if root == "" || fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	op := fs.Arg(0)

	home, _ := os.UserHomeDir()
	opts := Options{AllowWrites: writes, AllowCommands: commands, HomeDir: home, ProtectedPaths: StatePaths(home)}
	if commands {
		closeSB, err := configureSandbox(&opts, sbMode)
		if err != nil {
			return printErr(stdout, err)
		}
		defer closeSB()
	}
	ws, err := Open(root, opts)
	if err != nil {
		return printErr(stdout, err)
	}
	defer ws.Close()

	req, err := io.ReadAll(io.LimitReader(stdin, maxCLIRequest+1))
	if err != nil {
		return printErr(stdout, newErr(CodeInvalidRequest, "cannot read the request from stdin"))
	}
	if len(req) > maxCLIRequest {
		return printErr(stdout, newErr(CodeInvalidRequest, "request is larger than 16 MiB"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := ws.Do(ctx, op, req)
	if err != nil {
		return printErr(stdout, err)
	}
	stdout.Write(append(res, '\n'))
	return 0
}

// CLIError is the failure object RunCLI prints.
type CLIError struct {
	Error     string `json:"error"`
	ErrorCode Code   `json:"errorCode"`
}

func printErr(stdout io.Writer, err error) int {
	e := asError(err, CodeInvalidRequest, "failed")
	b, _ := json.Marshal(CLIError{Error: e.Message, ErrorCode: e.Code})
	stdout.Write(append(b, '\n'))
	return 1
}

// configureSandbox creates the command sandbox for the CLI. Choosing --sandbox off is the operator's explicit
// acceptance of unconfined commands.
func configureSandbox(opts *Options, mode string) (func(), error) {
	m, err := sandbox.ParseMode(mode)
	if err != nil {
		return nil, newErr(CodeInvalidRequest, "invalid --sandbox: "+err.Error())
	}
	sb, err := sandbox.New(sandbox.Config{Mode: m})
	if err != nil {
		return nil, newErr(CodeCommandUnavailable, "command sandbox unavailable: "+wire.ClipUTF16(err.Error(), 2000))
	}
	opts.Sandbox = sb
	opts.AllowUnconfinedCommands = m == sandbox.ModeOff
	return func() {}, nil
}
