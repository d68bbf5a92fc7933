package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/server"
)

// startDebugger validates --debug-listen and starts the step debugger's listener. It returns a function
// that waits for the listener to stop (nil when the debugger is off).
func startDebugger(ctx context.Context, addr string, srv *server.Server, log *slog.Logger) (func(), error) {
	if addr == "" {
		return nil, nil
	}
	if !listen.IsLoopback(addr) {
		return nil, fmt.Errorf("debug listener must bind loopback (127.0.0.1, [::1] or localhost), got %q", addr)
	}
	return nil, fmt.Errorf("--debug-listen: the step debugger is not built into this version yet")
}
