package main

import (
	"flag"

	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/server"
)

// listenerFlags are the main listener's request-hygiene and limit flags (internal/httpguard).
type listenerFlags struct {
	hosts, origins listFlag
}

// registerListenerFlags registers --allowed-hosts, --allowed-origins, --max-connections, --body-timeout
// and --idle-timeout into cfg; call apply after parsing.
func registerListenerFlags(fs *flag.FlagSet, cfg *server.Config) *listenerFlags {
	f := &listenerFlags{}
	fs.Var(&f.hosts, "allowed-hosts", "extra Host names the listener answers to (comma-separated; loopback names are always allowed on a loopback listener)")
	fs.Var(&f.origins, "allowed-origins", "browser origins allowed to call the service (comma-separated, e.g. https://app.example); its own origin always is")
	fs.IntVar(&cfg.Limits.MaxConns, "max-connections", httpguard.DefaultMaxConns, "open connections; more are answered 503 connection_limit (negative: no cap)")
	fs.DurationVar(&cfg.Limits.Body, "body-timeout", httpguard.DefaultBody, "time a request body has to arrive (negative: none)")
	fs.DurationVar(&cfg.Limits.Idle, "idle-timeout", httpguard.DefaultIdle, "idle keep-alive connections are closed after this (negative: never)")
	return f
}

func (f *listenerFlags) apply(cfg *server.Config) {
	cfg.AllowedHosts = f.hosts
	cfg.AllowedOrigins = f.origins
}
