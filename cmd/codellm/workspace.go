package main

import (
	"io"
	"os"

	"github.com/codellm/codellm/internal/workspace"
)

// cmdWorkspace is the local front end of the workspace tools: request JSON on stdin, result on stdout.
func cmdWorkspace(args []string, stdout, stderr io.Writer) int {
	return workspace.RunCLI(args, os.Stdin, stdout, stderr)
}
