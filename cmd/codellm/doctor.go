package main

import (
	"fmt"
	"io"

	"github.com/codellm/codellm/internal/sandbox"
)

// cmdDoctor probes the host and prints each sandbox mechanism; it exits non-zero when the configured mode
// cannot run here, so it can gate a deployment.
func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("doctor", "doctor [flags]", stderr)
	var ef execFlags
	ef.register(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON (the same object /readyz serves)")
	set, code := parse(fs, args, nil)
	if code >= 0 {
		return code
	}
	ef.set = set
	log, err := ef.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "codellm doctor: %v\n", err)
		return 2
	}
	scfg, err := ef.sandboxConfig(log)
	if err != nil {
		fmt.Fprintf(stderr, "codellm doctor: %v\n", err)
		return 2
	}
	rep := sandbox.Probe(scfg)
	if *asJSON {
		writeJSON(stdout, rep)
	} else {
		rep.WriteTable(stdout)
	}
	if !rep.Ready {
		fmt.Fprintf(stderr, "codellm doctor: sandbox mode %q cannot run on this host\n", scfg.Mode)
		return 1
	}
	return 0
}
