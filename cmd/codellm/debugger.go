package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/debugger"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/server"
)

// debugFlags are serve's settings of the step debugger (openai-contract §14).
type debugFlags struct {
	listen      string
	maxSessions int
	sessionTTL  time.Duration
}

// registerDebugFlags registers the debugger's settings into fs; the result is filled when fs is loaded.
func registerDebugFlags(fs *flag.FlagSet) *debugFlags {
	f := &debugFlags{}
	register(fs, debugSettings(), func(v *config.Values) {
		f.listen, f.maxSessions, f.sessionTTL = v.String("debug-listen"), v.Int("debug-max-sessions"), v.Duration("debug-session-ttl")
	})
	return f
}

// startDebugger validates --debug-listen and starts the step debugger's listener. It returns a function
// that stops the listener and waits for it (nil when the debugger is off); ctx ending stops it too.
func startDebugger(ctx context.Context, f *debugFlags, sealPath string, srv *server.Server, log *slog.Logger) (func(), error) {
	if f.listen == "" {
		return nil, nil
	}
	if err := debugger.CheckListen(f.listen); err != nil {
		return nil, err
	}
	if f.maxSessions < 1 {
		return nil, fmt.Errorf("--debug-max-sessions must be at least 1, got %d", f.maxSessions)
	}
	if f.sessionTTL <= 0 {
		return nil, fmt.Errorf("--debug-session-ttl must be positive, got %v", f.sessionTTL)
	}
	d, err := debugger.New(debugger.Config{
		Engine:      srv.Engine(),
		MaxSessions: f.maxSessions,
		SessionTTL:  f.sessionTTL,
		Logger:      log,
		SealPath:    sealPath,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return nil, fmt.Errorf("--debug-listen: %w", err)
	}
	log.Info("step debugger listening (loopback only, no authentication)", "debug_listen", ln.Addr().String())
	// The debugger stops with ctx, or when serve calls the returned function because the main listener
	// ended on its own (say, its port was taken): waiting alone would then block forever.
	dctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Serve(dctx, ln); err != nil {
			log.Error("step debugger stopped", "err", err)
		}
	}()
	return func() { stop(); <-done }, nil
}

// cmdDebug steps a markdown body in the terminal with the service's sandbox and limits: each block's
// result and the pipe buffer are printed, Enter runs the next block, "e" edits the buffer in $EDITOR.
// Exit status: 0 the run finished with a valid output contract, 1 otherwise, 2 usage.
func cmdDebug(args []string, stdout, stderr io.Writer) int {
	b, code := prepareBody("debug", args, stderr, true,
		config.Setting{Name: "editor", Kind: config.String, Usage: "command that edits the pipe buffer (default $VISUAL, then $EDITOR, then vi)"})
	if code >= 0 {
		return code
	}
	defer b.sb.Close()
	eng := engine.New(b.ecfg, nil)
	sess, err := debugger.NewSession(eng, b.body, b.bag)
	if err != nil {
		fmt.Fprintf(stderr, "codellm debug: %v\n", err)
		return 1
	}
	// --deterministic (with the bag's now) steps the body as a deterministic chat run of it would.
	det, err := eng.Determinism(engine.DeterminismChoice{}, b.bag)
	if err != nil {
		sess.Close()
		fmt.Fprintf(stderr, "codellm debug: %v\n", err)
		return 1
	}
	sess.SetDeterminism(det)
	defer sess.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ok, err := debugger.Terminal(ctx, sess, os.Stdin, stdout, debugger.EditorCommand(b.v.String("editor"), os.Stdin, stdout, stderr))
	if err != nil {
		fmt.Fprintf(stderr, "codellm debug: %v\n", err)
		return 1
	}
	if !ok {
		return 1
	}
	return 0
}
