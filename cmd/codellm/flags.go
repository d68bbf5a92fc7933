package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/codellm/codellm/internal/config"
)

// newFlagSet returns a FlagSet whose --help prints the command's usage and its settings tables
// (internal/config) to stderr.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: codellm %s\n\n", synopsis)
		config.Usage(stderr, fs, families(fs))
	}
	return fs
}

// families are the alias families a command reads: LIBRECHAT_CODE_* for the worker (bridge-protocol
// §12), none for the rest (serve reads trip2g's names, which are per-setting aliases).
func families(fs *flag.FlagSet) []config.Family {
	if strings.HasPrefix(fs.Name(), "worker") {
		return []config.Family{config.LibreChat}
	}
	return nil
}

// register adds one settings table to fs; bind receives the loaded values.
func register(fs *flag.FlagSet, settings []config.Setting, bind func(*config.Values)) {
	(&config.Set{Settings: settings, Bind: bind}).Register(fs)
}

// parse parses args, then loads every table registered into fs from the command line and the
// environment (internal/config's one rule). It returns an exit code >= 0 when the command should stop:
// 0 for --help, 2 for a bad flag or variable.
func parse(fs *flag.FlagSet, args []string) (*config.Values, int) {
	return config.Parse(fs, args, families(fs), os.LookupEnv)
}

// localCommand builds and parses the FlagSet of a local command (run, debug, blocks, doctor): the
// execution table, then the command's own rows. code >= 0 means the command should exit with it.
func localCommand(name, synopsis string, args []string, stderr io.Writer, own ...config.Setting) (*execFlags, *flag.FlagSet, *config.Values, int) {
	fs := newFlagSet(name, synopsis, stderr)
	ef := &execFlags{}
	ef.register(fs)
	register(fs, own, nil)
	v, code := parse(fs, args)
	return ef, fs, v, code
}
