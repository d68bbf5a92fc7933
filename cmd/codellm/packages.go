package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/packages"
)

// packagesCommands are `codellm packages`' subcommands, for its --help.
var packagesCommands = []subcommand{
	{"add", "python|node NAME [--] INSTALLER-ARGS…", "build a package set on this host with pip (--target) or npm (--prefix): every block imports it, read-only"},
	{"list", "[--json]", "the package sets and what each holds"},
	{"remove", "NAME", "delete a package set (a running serve keeps the sets it started with)"},
}

// packagesDirSetting is the command's one setting: the serve setting of the same name.
var packagesDirSetting = config.Setting{Name: "packages-dir", Kind: config.String,
	Usage: "directory of the package sets (serve's --packages-dir, CODELLM_PACKAGES_DIR)"}

// cmdPackages is `codellm packages add|list|remove`: the operator's package sets (internal/packages).
func cmdPackages(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || isHelp(args[0]) {
		writeSubcommands(stderr, "packages", packagesCommands)
		fmt.Fprintln(stderr, "\nEach takes --packages-dir DIR (or CODELLM_PACKAGES_DIR); serve --packages-dir DIR puts the sets on the blocks' module paths.")
		if len(args) == 0 {
			return config.ExitUsage
		}
		return config.ExitOK
	}
	sub, args := args[0], args[1:]
	fs := newFlagSet("packages "+sub, "packages "+sub+" [flags] …", stderr)
	register(fs, []config.Setting{packagesDirSetting,
		{Name: "json", Kind: config.Bool, FlagOnly: true, Usage: "list: print JSON"}}, nil)
	v, code := parse(fs, args)
	if code >= 0 {
		return code
	}
	dir := v.String("packages-dir")
	if dir == "" {
		return config.UsageError(stderr, "packages "+sub, errors.New("no package directory: give --packages-dir DIR (or CODELLM_PACKAGES_DIR)"))
	}
	switch sub {
	case "add":
		return packagesAdd(dir, fs.Args(), stdout, stderr)
	case "list":
		return packagesList(dir, v.Bool("json"), stdout, stderr)
	case "remove":
		if fs.NArg() != 1 {
			return config.UsageError(stderr, "packages remove", errors.New("want one NAME"))
		}
		if err := packages.Remove(dir, fs.Arg(0)); err != nil {
			return failed(stderr, "packages remove", err)
		}
		fmt.Fprintf(stdout, "removed package set %s\n", fs.Arg(0))
		return config.ExitOK
	}
	return config.UsageError(stderr, "packages", fmt.Errorf("unknown command %q (add, list, remove)", sub))
}

func packagesAdd(dir string, args []string, stdout, stderr io.Writer) int {
	if len(args) < 3 {
		return config.UsageError(stderr, "packages add", errors.New("want python|node NAME and what to install (pip's or npm's arguments, after -- when they start with -)"))
	}
	s, err := packages.Add(dir, args[1], args[0], args[2:], stderr)
	if err != nil {
		return failed(stderr, "packages add", err)
	}
	fmt.Fprintf(stdout, "added package set %s (%s %s): %s\n", s.Name, s.Language, s.LanguageVersion, describe(s.Packages))
	return config.ExitOK
}

func packagesList(dir string, asJSON bool, stdout, stderr io.Writer) int {
	sets, err := packages.List(dir)
	if err != nil {
		return failed(stderr, "packages list", err)
	}
	if asJSON {
		if sets == nil {
			sets = []packages.Set{}
		}
		return writeJSON(stdout, sets)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLANGUAGE\tVERSION\tPACKAGES")
	for _, s := range sets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Language, s.LanguageVersion, describe(s.Packages))
	}
	tw.Flush()
	return config.ExitOK
}

func describe(ps []packages.Package) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name + " " + p.Version
	}
	return strings.Join(out, ", ")
}
