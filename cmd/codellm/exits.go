package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/codellm/codellm/internal/config"
)

// unavailableError is a start-up error that is the host's, not the settings': the sandbox's mechanisms,
// the listen address, … (config.ExitUnavailable).
type unavailableError struct{ err error }

func (e unavailableError) Error() string { return e.err.Error() }
func (e unavailableError) Unwrap() error { return e.err }

// unavailable marks err as the host's (nil stays nil).
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	return unavailableError{err}
}

// startFail reports a command's start-up error and returns its exit code: ExitUnavailable with the one
// line for the host's errors, else ExitUsage with the line and the --help hint (a start-up error that is
// not the host's is a setting that cannot work: an unknown program, an unreadable file, two flags that
// exclude each other).
func startFail(stderr io.Writer, command string, err error) int {
	var u unavailableError
	if errors.As(err, &u) {
		fmt.Fprintf(stderr, "codellm %s: %v\n", command, err)
		return config.ExitUnavailable
	}
	return config.UsageError(stderr, command, err)
}

// failed reports that the work itself failed (config.ExitFailed).
func failed(stderr io.Writer, command string, err error) int {
	fmt.Fprintf(stderr, "codellm %s: %v\n", command, err)
	return config.ExitFailed
}
