package workspace

import "context"

// ExecuteCommandRequest is the §9.2 execute_command request.
type ExecuteCommandRequest struct {
	envelope
	Command        string `json:"command"`
	Cwd            string `json:"cwd,omitempty"`
	TimeoutMs      *int   `json:"timeoutMs,omitempty"`
	MaxOutputBytes *int   `json:"maxOutputBytes,omitempty"`
}

// ExecuteCommandResult is the §9.2 execute_command result.
type ExecuteCommandResult struct {
	ExitCode  *int   `json:"exitCode"`
	Signal    string `json:"signal,omitempty"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	TimedOut  bool   `json:"timedOut"`
}

func (w *Workspace) commandsUsable() error {
	return newErr(CodeCommandDisabled, "commands are not enabled for this workspace")
}

func (w *Workspace) ExecuteCommand(ctx context.Context, r *ExecuteCommandRequest) (*ExecuteCommandResult, error) {
	return nil, w.commandsUsable()
}

func configureSandbox(opts *Options, mode string) (func(), error) {
	return func() {}, nil
}
