package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"

	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/server"
)

// debugFlags are serve's flags for the step debugger (openai-contract §14).
type debugFlags struct {
	listen string
}

func registerDebugFlags(fs *flag.FlagSet) *debugFlags {
	f := &debugFlags{}
	fs.StringVar(&f.listen, "debug-listen", "", "loopback address of the step debugger (empty: off)")
	return f
}

// startDebugger validates --debug-listen and starts the step debugger's listener. It returns a function
// that waits for the listener to stop (nil when the debugger is off).
func startDebugger(ctx context.Context, f *debugFlags, srv *server.Server, log *slog.Logger) (func(), error) {
	if f.listen == "" {
		return nil, nil
	}
	if !listen.IsLoopback(f.listen) {
		return nil, fmt.Errorf("debug listener must bind loopback (127.0.0.1, [::1] or localhost), got %q", f.listen)
	}
	return nil, fmt.Errorf("--debug-listen: the step debugger is not built into this version yet")
}
