package httpserve

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/codellm/codellm/internal/httpguard"
)

// Options configure Serve.
type Options struct {
	Limits httpguard.Limits // timeouts and connection cap (zero: httpguard's defaults)
	Log    *slog.Logger     // the server's and the limit listener's log (nil: discarded)
	// TLS wraps the limited listener (tls.Config); CertFile and KeyFile instead serve TLS the way
	// http.Server.ServeTLS does (HTTP/2 by ALPN included). Neither: plain HTTP, and an over-cap connection
	// is answered 503 before it is closed.
	TLS               *tls.Config
	CertFile, KeyFile string
	// Started receives the base context of every request once the server is built: it outlives the
	// serving context and is cancelled only when the drain grace has passed (or when Serve returns).
	Started func(runs context.Context)
	// Draining runs once the serving context ends, before the drain starts (refuse new work, wake long
	// polls, close sessions).
	Draining func()
	// Grace is how long in-flight requests get to finish after the serving context ends (default 10 s).
	// Then the request contexts are cancelled, which kills their runs, and handlers get AfterCancel more
	// to return before the remaining connections are closed (0: closed at once).
	Grace       time.Duration
	AfterCancel time.Duration
	// ConnContext and ConnState, when set, are the server's http.Server hooks of the same names (the hub
	// tracks its connections by kind with them).
	ConnContext func(ctx context.Context, c net.Conn) context.Context
	ConnState   func(c net.Conn, st http.ConnState)
}

// DefaultGrace is Options.Grace's default.
const DefaultGrace = 10 * time.Second

// Serve serves h on ln until ctx ends, then shuts down: Draining, stop accepting and wait for in-flight
// requests up to Grace, cancel the request contexts, wait up to AfterCancel, close what is left; it
// returns once the server has stopped. The error is the one serving failed with, or the shutdown's
// (context.DeadlineExceeded when requests outlived the grace), nil after a clean drain.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, o Options) error {
	ln = o.Limits.Listener(ln, o.TLS == nil && o.CertFile == "", o.Log)
	if o.TLS != nil {
		ln = tls.NewListener(ln, o.TLS)
	}
	runs, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	hs := o.Limits.Server(h, o.Log)
	hs.BaseContext = func(net.Listener) context.Context { return runs }
	hs.ConnContext, hs.ConnState = o.ConnContext, o.ConnState
	if o.Started != nil {
		o.Started(runs)
	}
	errc := make(chan error, 1)
	go func() {
		if o.CertFile != "" {
			errc <- hs.ServeTLS(ln, o.CertFile, o.KeyFile)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if o.Draining != nil {
		o.Draining()
	}
	err := shutdown(hs, o.Grace, DefaultGrace)
	if err != nil {
		cancelRuns()
		if o.AfterCancel > 0 {
			err = shutdown(hs, o.AfterCancel, 0)
		}
	}
	if err != nil {
		hs.Close()
	}
	<-errc
	return err
}

// shutdown stops hs accepting and waits up to d (def when d is not positive) for its handlers.
func shutdown(hs *http.Server, d, def time.Duration) error {
	if d <= 0 {
		d = def
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return hs.Shutdown(ctx)
}
