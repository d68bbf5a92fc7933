package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/execmanifest"
	"github.com/codellm/codellm/internal/filerelay"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/worker"
)

// relayFlags are the file relay's settings under the Code API worker's names (LIBRECHAT_CODE_FILE_RELAY_*,
// LIBRECHAT_CODE_EXECUTION_MANIFEST_PUBLIC_KEY; CODELLM_* too).
type relayFlags struct {
	upstream, token, host, manifestKey string
	port, timeoutMS, maxConcurrent     int
	maxBytes                           int64
}

// relayLimitSettings are shared by `worker run` (its in-process relay) and `worker relay`.
func relayLimitSettings() []config.Setting {
	return []config.Setting{
		{Name: "file-relay-max-bytes", Kind: config.Size, Default: "16MiB", Positive: true, Usage: "file relay: bytes of one upload and of one download"},
		{Name: "file-relay-timeout-ms", Kind: config.Int, Default: "30000", Positive: true, Usage: "file relay: milliseconds one exchange with the egress gateway may take"},
		{Name: "file-relay-max-concurrent-requests", Kind: config.Int, Default: "8", Positive: true, Usage: "file relay: exchanges at once; more are answered 503"},
	}
}

// workerRelaySettings are `worker run`'s: the egress gateway and the manifest key turn the relay on.
func workerRelaySettings() []config.Setting {
	return append([]config.Setting{
		{Name: "file-relay-upstream", Kind: config.String, Usage: "the LibreChat Code API's egress gateway base URL (https): by-reference inputs and generated files go through an in-process file relay, under signed execution manifests (any runtime supervisor)"},
		{Name: "execution-manifest-public-key", Kind: config.String, Usage: "the Code API's Ed25519 execution manifest verifier key (PEM or base64 SPKI DER); required with --file-relay-upstream"},
	}, relayLimitSettings()...)
}

// relaySettings are `worker relay`'s: the standalone relay (upstream's `relay` command).
func relaySettings() []config.Setting {
	return append([]config.Setting{
		{Name: "file-relay-upstream", Kind: config.String, Usage: "the Code API's egress gateway base URL (required; https unless a local development host)"},
		{Name: "file-relay-token", Kind: config.String, Secret: true, Usage: "the token sandboxes present in X-LibreChat-Code-Relay-Token (required)"},
		{Name: "file-relay-host", Kind: config.String, Default: "0.0.0.0", Usage: "file relay listen host"},
		{Name: "file-relay-port", Kind: config.Int, Default: "3000", Usage: "file relay listen port"},
	}, relayLimitSettings()...)
}

func (f *relayFlags) bindLimits(v *config.Values) {
	f.maxBytes, f.timeoutMS, f.maxConcurrent = v.Size("file-relay-max-bytes"), v.Int("file-relay-timeout-ms"), v.Int("file-relay-max-concurrent-requests")
}

func (f *relayFlags) config() filerelay.Config {
	return filerelay.Config{Upstream: f.upstream, Token: f.token, MaxBytes: f.maxBytes,
		Timeout: time.Duration(f.timeoutMS) * time.Millisecond, MaxConcurrent: f.maxConcurrent}
}

// workerRelay is `codellm worker relay`: the relay alone, for a deployment that runs it beside the
// sandboxes (upstream's relay container). It serves until SIGINT/SIGTERM.
func workerRelay(args []string, stderr io.Writer) int {
	fs := newFlagSet("worker relay", "worker relay [flags]", stderr)
	var f relayFlags
	register(fs, relaySettings(), func(v *config.Values) {
		f.upstream, f.token, f.host, f.port = v.String("file-relay-upstream"), v.String("file-relay-token"), v.String("file-relay-host"), v.Int("file-relay-port")
		f.bindLimits(v)
	})
	pos, code := parseInterspersed(fs, args, stderr)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		return config.UsageError(stderr, "worker relay", fmt.Errorf("unexpected argument %q (relay takes flags only)", pos[0]))
	}
	switch {
	case f.upstream == "":
		return workerFail(stderr, fmt.Errorf("%w: --file-relay-upstream (LIBRECHAT_CODE_FILE_RELAY_UPSTREAM) is required", worker.ErrConfig))
	case f.token == "":
		return workerFail(stderr, fmt.Errorf("%w: --file-relay-token (LIBRECHAT_CODE_FILE_RELAY_TOKEN) is required", worker.ErrConfig))
	}
	rl, err := filerelay.New(f.config())
	if err != nil {
		return workerFail(stderr, fmt.Errorf("%w: %v", worker.ErrConfig, err))
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(f.port)))
	if err != nil {
		return workerFail(stderr, fmt.Errorf("%w: file relay: %v", worker.ErrConfig, err))
	}
	drain, _, stop := signalContexts()
	defer stop()
	fmt.Fprintf(stderr, "codellm worker: file relay on %s forwarding to %s\n", ln.Addr(), f.upstream)
	if err := httpserve.Serve(drain, ln, rl, httpserve.Options{Limits: rl.Limits()}); err != nil && !errors.Is(err, context.Canceled) {
		return workerFail(stderr, err)
	}
	return 0
}

// fileEgress starts the worker's in-process relay on a loopback port when --file-relay-upstream is set
// and returns the FileEgress the worker wraps its supervisor with, and a func stopping it. Its token is random per
// process: nothing outside this process ever needs it.
func (f *relayFlags) fileEgress(log *slog.Logger) (*worker.FileEgress, func(), error) {
	if f.upstream == "" {
		if f.manifestKey != "" {
			return nil, nil, fmt.Errorf("%w: --execution-manifest-public-key needs --file-relay-upstream", worker.ErrConfig)
		}
		return nil, func() {}, nil
	}
	if f.manifestKey == "" {
		return nil, nil, fmt.Errorf("%w: --execution-manifest-public-key (LIBRECHAT_CODE_EXECUTION_MANIFEST_PUBLIC_KEY) is required with --file-relay-upstream", worker.ErrConfig)
	}
	key, err := execmanifest.ParsePublicKey(f.manifestKey)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --execution-manifest-public-key: %v", worker.ErrConfig, err)
	}
	tok := make([]byte, 32)
	rand.Read(tok)
	f.token = hex.EncodeToString(tok)
	rl, err := filerelay.New(f.config())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", worker.ErrConfig, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("%w: file relay: %v", worker.ErrConfig, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := httpserve.Serve(ctx, ln, rl, httpserve.Options{Limits: rl.Limits(), Log: log, Grace: time.Second}); err != nil {
			log.Warn("file relay stopped", "err", err)
		}
	}()
	log.Info("file relay", "listen", ln.Addr().String(), "upstream", f.upstream)
	fe := &worker.FileEgress{RelayURL: "http://" + ln.Addr().String(), Token: f.token, Key: key,
		Timeout: time.Duration(f.timeoutMS) * time.Millisecond, MaxBytes: f.maxBytes}
	return fe, func() { cancel(); <-done }, nil
}
