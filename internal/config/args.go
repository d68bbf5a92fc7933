package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// The exit codes every codellm command shares, one per kind of failure (README, "Exit codes"). The worker's
// 3, 4 and 5 are the bridge protocol's (§12).
const (
	ExitOK          = 0
	ExitFailed      = 1 // the work itself failed: a block, the run's output, a remote party's refusal
	ExitUsage       = 2 // the command line or a setting: an unknown flag, a bad value, a missing or unreadable argument, settings that exclude each other, a required setting left out
	ExitAuth        = 3 // worker: the hub refused its credential
	ExitFenced      = 4 // worker: another incarnation owns it
	ExitQuarantined = 5 // worker: local state may be inconsistent
	ExitUnavailable = 6 // the host cannot do what the settings ask: a sandbox mechanism missing, the listen address taken, a store that will not open
)

// HelpHint is the line that follows every usage error: where the command's flags are explained.
func HelpHint(command string) string {
	return fmt.Sprintf("see 'codellm %s --help'", command)
}

// UsageError writes "codellm COMMAND: err" and the help hint to w and returns ExitUsage: one line that
// names the real cause, and where to read on, instead of a screen of usage that scrolls it away.
func UsageError(w io.Writer, command string, err error) int {
	fmt.Fprintf(w, "codellm %s: %v\n%s\n", command, err, HelpHint(command))
	return ExitUsage
}

// parseArgs parses args into fs with the flags anywhere among the positional arguments: `run role.md
// --input bag.json` reads --input. "--" ends the flags; "-" alone is positional (stdin). A flag may be
// spelled with one or two dashes and take its value after "=" or as the next argument (a bool flag only
// after "="). With dashPositional, an argument that begins with "-" but names no flag is positional
// (pairing codes are base64url and may begin with a dash) instead of an unknown flag. Afterwards fs.Args()
// are the positional arguments in order. flag.ErrHelp means -h or --help was given.
func parseArgs(fs *flag.FlagSet, args []string, dashPositional bool) error {
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if name == "h" || name == "help" {
			return flag.ErrHelp
		}
		f := fs.Lookup(name)
		if f == nil || name == "" || strings.HasPrefix(name, "-") {
			if dashPositional {
				pos = append(pos, a)
				continue
			}
			return fmt.Errorf("unknown flag %s", strings.SplitN(a, "=", 2)[0])
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() && !hasValue {
			value, hasValue = "true", true
		}
		if !hasValue {
			if i+1 == len(args) {
				return fmt.Errorf("%s needs a value", spelling(fs, name))
			}
			i++
			value = args[i]
		}
		if err := f.Value.Set(value); err != nil {
			return setError(fs, f, value, err)
		}
	}
	// The values are set: this only records the positional arguments as fs.Args().
	return fs.Parse(append([]string{"--"}, pos...))
}

// spelling is how the docs write a flag of fs: --name for codellm's own, -name for a peer's alias
// (trip2g's -addr).
func spelling(fs *flag.FlagSet, name string) string {
	if v, ok := fs.Lookup(name).Value.(*flagValue); ok {
		for _, p := range v.s.Spellings(nil) {
			if p.flag == name {
				return p.Name
			}
		}
	}
	return "--" + name
}

// setError is a flag's bad value as an *Error (the flag's spelling, the value, the setting), or for a flag
// outside the tables a plain error naming it.
func setError(fs *flag.FlagSet, f *flag.Flag, value string, err error) error {
	if v, ok := f.Value.(*flagValue); ok {
		return &Error{Spelling: spelling(fs, f.Name), Value: v.s.show(value), Setting: v.s.display(), Err: err}
	}
	return fmt.Errorf("--%s=%q: %v", f.Name, value, err)
}

// Parse parses args (flags anywhere, parseArgs) into fs and loads every set registered into it. It
// returns the exit code the command should stop with, or -1 to go on: ExitOK after --help (the command's
// usage is printed), ExitUsage for an unknown flag, a missing value or a bad value of a flag or a
// variable (one line on fs.Output() naming it, then HelpHint).
func Parse(fs *flag.FlagSet, args []string, families []Family, lookup func(string) (string, bool)) (*Values, int) {
	return parse(fs, args, families, lookup, false)
}

// ParseDashPositional is Parse for a command whose positional arguments may begin with "-" (the worker's
// pairing codes): an argument naming no flag is positional, never an unknown flag.
func ParseDashPositional(fs *flag.FlagSet, args []string, families []Family, lookup func(string) (string, bool)) (*Values, int) {
	return parse(fs, args, families, lookup, true)
}

func parse(fs *flag.FlagSet, args []string, families []Family, lookup func(string) (string, bool), dashPositional bool) (*Values, int) {
	if err := parseArgs(fs, args, dashPositional); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return nil, ExitOK
		}
		return nil, UsageError(fs.Output(), fs.Name(), err)
	}
	v, err := Load(fs, families, lookup)
	if err != nil {
		return nil, UsageError(fs.Output(), fs.Name(), err)
	}
	return v, -1
}
