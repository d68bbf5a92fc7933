package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/codellm/codellm/internal/chat"
	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/markdown"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/seal"
)

// readBody reads a markdown body from a file or "-" (stdin).
func readBody(name string) (string, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(name)
	}
	return string(b), err
}

// readBag reads --input's fleet_input bag (nil without one); it must be JSON.
func readBag(name string) ([]byte, error) {
	if name == "" {
		return nil, nil
	}
	bag, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("--input: %v", err)
	}
	if !json.Valid(bag) {
		return nil, fmt.Errorf("--input %s is not valid JSON", name)
	}
	return bag, nil
}

// bodyRun is what run and debug start from: the loaded settings, the FILE.md body, the --input bag and
// the engine configuration built from the execution settings.
type bodyRun struct {
	v    *config.Values
	body string
	bag  []byte
	ecfg engine.Config
	// sb is the Sandbox behind ecfg; the command closes it, which kills the pre-started helpers and
	// removes the cgroups pooled for them (left behind, the next codellm's sweep had to remove them).
	sb *sandbox.Sandbox
}

// prepareBody parses a body command's flags (the execution table, --input and own), reads its one
// FILE.md argument (- for stdin, unless noStdin) and the bag, and builds the engine configuration. It
// returns an exit code >= 0 when the command should stop (the reason is on stderr): ExitUsage for the
// command line, its files and settings, ExitUnavailable when the host cannot run the sandbox asked for.
func prepareBody(name string, args []string, stderr io.Writer, noStdin bool, own ...config.Setting) (*bodyRun, int) {
	ef, fs, v, code := localCommand(name, name+" [flags] FILE.md|-", args, stderr, append([]config.Setting{inputSetting}, own...)...)
	if code >= 0 {
		return nil, code
	}
	if fs.NArg() != 1 {
		return nil, config.UsageError(stderr, name, fmt.Errorf("want exactly one FILE.md (or - for stdin), got %d arguments", fs.NArg()))
	}
	if noStdin && fs.Arg(0) == "-" {
		return nil, config.UsageError(stderr, name, errors.New("the body cannot come from stdin: stdin answers the step prompts"))
	}
	log, err := ef.logger(stderr)
	if err != nil {
		return nil, config.UsageError(stderr, name, err)
	}
	b := &bodyRun{v: v}
	if b.body, err = readBody(fs.Arg(0)); err != nil {
		return nil, config.UsageError(stderr, name, err)
	}
	if b.bag, err = readBag(v.String("input")); err != nil {
		return nil, config.UsageError(stderr, name, err)
	}
	if b.ecfg, b.sb, err = ef.build(log); err != nil {
		return nil, startFail(stderr, name, err)
	}
	return b, -1
}

// cmdRun runs a markdown body through exactly the service's pipeline and sandbox, so role authors can try
// a role locally. Exit status: 0 success, 1 the run or its output failed (message on stderr), 2 usage.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	b, code := prepareBody("run", args, stderr, false,
		config.Setting{Name: "changes", Kind: config.Bool, Usage: "print the raw {changes, answer} output instead of tool calls"})
	if code >= 0 {
		return code
	}
	defer b.sb.Close()
	res, secrets, err := runBody(b.ecfg, b.body, b.bag)
	if err != nil {
		fmt.Fprintf(stderr, "codellm run: %v\n", err)
		return 1
	}
	return printRun(stdout, stderr, res, secrets, b.v.Bool("changes"))
}

// runBody unseals the bag's secrets and runs the body as one chat run of it would, until SIGTERM or
// SIGINT; the result's output is already redacted of the secrets.
func runBody(ecfg engine.Config, body string, bag []byte) (*pipeline.Result, []string, error) {
	bag, secrets, err := seal.Unseal(bag, os.Getenv, seal.ExposedIn(ecfg.Exposed))
	if err != nil {
		return nil, nil, fmt.Errorf("%v (unseal_error)", err)
	}
	eng := engine.New(ecfg, nil)
	resolved, err := eng.Plan([]markdown.Source{{Message: 0, Text: body}})
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	res, _, err := eng.Run(ctx, engine.RunRequest{Resolved: resolved, Input: bag})
	if err != nil {
		return nil, nil, err
	}
	chat.RedactResult(res, secrets)
	return res, secrets, nil
}

// printRun prints a run's tool calls (or with changes its raw {changes, answer}) and returns the exit
// status.
func printRun(stdout, stderr io.Writer, res *pipeline.Result, secrets []string, changes bool) int {
	if res.Err != nil {
		printStderrs(stderr, res)
		fmt.Fprintf(stderr, "codellm run: %s (%s)\n", res.Err.Message, res.Err.Code)
		return 1
	}
	if changes {
		if _, err := contract.Parse(res.Stdout); err != nil {
			fmt.Fprintf(stderr, "codellm run: %s\n", seal.Redact(err.Error(), secrets))
			return 1
		}
		stdout.Write(res.Stdout)
		return 0
	}
	calls, err := engine.Answer(res.Stdout, nil)
	if err != nil {
		fmt.Fprintf(stderr, "codellm run: %s\n", seal.Redact(err.Error(), secrets))
		return 1
	}
	return writeJSON(stdout, toolCallsJSON(calls))
}

// printStderrs shows each block's captured stderr, which is what an author debugging a role needs.
func printStderrs(w io.Writer, res *pipeline.Result) {
	for _, b := range res.Blocks {
		if len(b.Stderr) > 0 {
			fmt.Fprintf(w, "--- block %d/%d (%s) stderr ---\n%s\n", b.Index+1, len(res.Blocks), b.Program, b.Stderr)
		}
	}
}

type wireCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolCallsJSON renders calls exactly as they appear in a completion's message.tool_calls.
func toolCallsJSON(calls []contract.ToolCall) []wireCall {
	out := make([]wireCall, len(calls))
	for i, c := range calls {
		out[i].ID, out[i].Type = c.ID, "function"
		out[i].Function.Name, out[i].Function.Arguments = c.Name, c.Arguments
	}
	return out
}

func writeJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1
	}
	return 0
}
