package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/seal"
)

// maxSealInput bounds what `codellm seal` reads: a credential, not a file.
const maxSealInput = 1 << 20

func cmdSeal(args []string, stdout, stderr io.Writer) int {
	return sealCommand(args, os.Stdin, stdout, stderr)
}

// sealCommand implements `codellm seal [--env-key NAME]` the way trip2g's codellm does: the plaintext
// arrives on stdin (an argv secret shows in the process table and shell history), the key is named, not
// passed, and resolved from codellm's own environment — where `serve` resolves it — and the blob goes to
// stdout. Trailing newlines are what echo and heredocs add, never part of a credential.
func sealCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("seal", "seal [--env-key NAME] < plaintext", stderr)
	// --env-key names the variable; it is never itself read from the environment (FlagOnly), as before.
	register(fs, []config.Setting{{Name: "env-key", Kind: config.String, FlagOnly: true, Default: seal.DefaultKeyEnv,
		Usage: "environment variable holding the 32-byte seal key (SEAL_KEY or SEAL_KEY_<SUFFIX>)"}}, nil)
	v, code := parse(fs, args)
	if code >= 0 {
		return code
	}
	envKey := v.String("env-key")
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "codellm seal: the plaintext is read from stdin, never from arguments")
		return 2
	}
	if !seal.KeyEnvAllowed(envKey) {
		fmt.Fprintf(stderr, "codellm seal: --env-key %q: want %s or %s_<SUFFIX> (the names serve opens)\n",
			envKey, seal.DefaultKeyEnv, seal.DefaultKeyEnv)
		return 2
	}
	key := os.Getenv(envKey)
	if key == "" {
		fmt.Fprintf(stderr, "codellm seal: %s is not set\n", envKey)
		return 1
	}
	if len(key) != seal.KeySize {
		fmt.Fprintf(stderr, "codellm seal: %s must hold exactly %d bytes\n", envKey, seal.KeySize)
		return 1
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxSealInput+1))
	if err != nil {
		fmt.Fprintf(stderr, "codellm seal: read stdin: %v\n", err)
		return 1
	}
	if len(data) > maxSealInput {
		fmt.Fprintf(stderr, "codellm seal: stdin is larger than %d bytes\n", maxSealInput)
		return 1
	}
	plain := strings.TrimRight(string(data), "\n")
	if plain == "" {
		fmt.Fprintln(stderr, "codellm seal: nothing to seal on stdin")
		return 1
	}
	blob, err := seal.Seal(key, plain)
	if err != nil {
		fmt.Fprintf(stderr, "codellm seal: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, blob)
	return 0
}
