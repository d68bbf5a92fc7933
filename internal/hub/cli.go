package hub

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/hub/filestore"
	"github.com/codellm/codellm/internal/hub/redisstore"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/listen"
)

// RunCLI implements `codellm hub [serve|pair|revoke|status] …` and returns
// the exit code: 0 success, 1 error, 2 usage.
func RunCLI(args []string, stdout, stderr io.Writer) int {
	return runCLI(context.Background(), args, stdout, stderr, os.LookupEnv)
}

func runCLI(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	cmd := "serve"
	if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveCLI(ctx, args, stderr, lookup)
	case "pair", "revoke", "status":
		return adminCLI(ctx, cmd, args, stdout, stderr, lookup)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stderr, cliUsage)
		return config.ExitOK
	}
	return config.UsageError(stderr, "hub", fmt.Errorf("unknown command %q (serve, pair, revoke, status)", cmd))
}

// cliUsage is `codellm hub --help`: the subcommands; each one's --help has its flags.
const cliUsage = `Usage: codellm hub COMMAND [flags]

Commands:
  serve --admin-token T --api-key K [--listen ADDR] [--store PATH|redis://HOST:PORT/DB]
      run the hub (the default: 'codellm hub' alone serves); --demo generates the token and key
  pair <workerId> [--tenant T --principal type:id]
      create a pairing code for a worker and print it (for 'codellm worker pair')
  revoke <workerId>
      revoke a worker's credential
  status <workerId>
      print a worker's registration and connection state as JSON

'codellm hub COMMAND --help' shows a command's flags; pair, revoke and status take --url and --admin-token.
`

// newFlagSet is a hub command's FlagSet; --help prints its settings table (internal/config).
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: codellm %s [flags]\n\n", name)
		config.Usage(stderr, fs, families)
	}
	return fs
}

// serveCLI is `codellm hub serve`. Exit status: 0 after a clean stop, ExitUsage for the command line and
// settings, ExitUnavailable when the store or the listen address cannot be had, ExitFailed when serving
// failed.
func serveCLI(ctx context.Context, args []string, stderr io.Writer, lookup func(string) (string, bool)) int {
	fs := newFlagSet("hub serve", stderr)
	(&config.Set{Settings: serveSettings()}).Register(fs)
	v, code := config.Parse(fs, args, families, lookup)
	if code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return config.UsageError(stderr, "hub serve", fmt.Errorf("unexpected argument %q (serve takes flags only)", fs.Arg(0)))
	}
	cfg := Config{
		AdminToken: v.String("admin-token"), WorkerToken: v.String("worker-token"), AuthMode: v.String("auth-mode"),
		DynamicWorkers: v.Bool("dynamic-workers"), WorkerIDs: v.List("worker-ids"), SignedPathPrefix: v.String("signed-path-prefix"),
		Logger: slog.New(slog.NewTextHandler(stderr, nil)).With("component", "hub"),
	}
	cfg.RuntimeSessionMode = v.String("runtime-session-mode")
	v.Warn(cfg.Logger)
	redisURL, path, err := checkServeSettings(&cfg, v, stderr)
	if err != nil {
		return config.UsageError(stderr, "hub serve", err)
	}
	unavailable := func(err error) int {
		fmt.Fprintf(stderr, "codellm hub: %v\n", err)
		return config.ExitUnavailable
	}
	st, feed, err := openStore(ctx, redisURL, path, v.Bool("redis-allow-eviction"), stderr)
	if errors.Is(err, redisstore.ErrURL) {
		return config.UsageError(stderr, "hub serve", err)
	} else if err != nil {
		return unavailable(err)
	}
	defer st.Close()
	files, err := openFiles(ctx, st, redisURL, path, cfg.FileLimits)
	if err != nil {
		return unavailable(err)
	}
	defer files.Close()
	cfg.Files = files
	h, err := New(cfg, st)
	if err != nil {
		return config.UsageError(stderr, "hub serve", err)
	}
	defer h.Close()
	defer watchFeed(ctx, feed, h)()
	ln, err := net.Listen("tcp", v.String("listen"))
	if err != nil {
		return unavailable(fmt.Errorf("--listen %s: %v", v.String("listen"), err))
	}
	if err := serveHTTP(ctx, h, ln, v.String("tls-cert"), v.String("tls-key"), stderr); err != nil {
		fmt.Fprintf(stderr, "codellm hub: %v\n", err)
		return config.ExitFailed
	}
	return config.ExitOK
}

// checkServeSettings checks what serve's settings can be checked for without the store or the network
// and fills cfg: the listener rule, the credentials (--demo generates missing ones), the client keys, the
// limits and the store's place.
func checkServeSettings(cfg *Config, v *config.Values, stderr io.Writer) (redisURL, path string, err error) {
	listenAddr := v.String("listen")
	cert, key := v.String("tls-cert"), v.String("tls-key")
	if err := checkListener(listenAddr, cert, key, v.Bool("behind-proxy")); err != nil {
		return "", "", err
	}
	if cert != "" {
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			return "", "", fmt.Errorf("--tls-cert/--tls-key: %v", err)
		}
	}
	redisURL, path, err = storeTarget(v.String("store"), v.String("store-kind"), v.String("redis-url"), v.String("data-dir"))
	if err != nil {
		return "", "", err
	}
	apiKey := v.String("api-key")
	if v.Bool("demo") {
		if err := demoCredentials(&cfg.AdminToken, &apiKey, listenAddr, stderr); err != nil {
			return "", "", err
		}
	}
	if err := readClientKeys(cfg, apiKey, v.String("client-keys-file")); err != nil {
		return "", "", err
	}
	if err := readClientJWT(cfg, v); err != nil {
		return "", "", err
	}
	if err := requireCredentials(cfg); err != nil {
		return "", "", err
	}
	applyLimits(cfg, v)
	switch s := v.String("rate-limits"); strings.ToLower(s) {
	case "on", "true", "1":
	case "off", "false", "0":
		cfg.RateLimits.Off = true
	default:
		return "", "", fmt.Errorf("CODELLM_HUB_RATE_LIMITS is %q: use on (upstream's per-caller limits) or off", s)
	}
	if cfg.CredentialTTL != 0 && cfg.CredentialTTL < MinCredentialTTL {
		return "", "", fmt.Errorf("CODELLM_HUB_CREDENTIAL_TTL is %v, under the minimum %v: a worker refreshes a credential "+
			"once it expires within its refresh window (60 s) plus its estimate of the hub's clock offset (+60 s until it "+
			"learns it) and rejects a new one that is not later than that, so a shorter lifetime makes it exit with an "+
			"authentication error and get 401 for good; set it to %v or more (or leave it unset for 5m)", cfg.CredentialTTL, MinCredentialTTL, MinCredentialTTL)
	}
	return redisURL, path, nil
}

// MinCredentialTTL is the shortest worker credential lifetime `codellm hub serve` accepts (issue 40 item
// 11). A worker (codellm's, and LibreChat's @librechat/code, which share bridge-protocol §4.2) treats a
// credential expiring within now + clock offset (+60 s before its first registration) + 60 s as due, and
// refuses a refreshed one that does not expire after that threshold; a minute on top covers the refresh
// round trip (10 s timeout) and clock skew. Config itself takes any lifetime: tests pair it with a worker
// whose windows they shorten.
const MinCredentialTTL = 3 * time.Minute

// requireCredentials refuses a hub nobody could use or everybody could: without an admin token pairing
// and the admin routes are closed to all (and a static worker token would be empty); without a client
// key no client can call /v1/exec or the chat route.
func requireCredentials(cfg *Config) error {
	if cfg.AdminToken == "" {
		return errors.New("no admin token: set CODELLM_HUB_ADMIN_TOKEN (or --admin-token) to a secret of at least 32 characters; it guards pairing and the admin routes (or pass --demo on a loopback listener to generate one)")
	}
	if len(cfg.ClientKeys) == 0 && cfg.ClientJWT == nil {
		return errors.New("no client key: set CODELLM_HUB_API_KEY (or --api-key), --client-keys-file, or CODELLM_HUB_CLIENT_JWT_PUBLIC_KEY for signed tokens; without one no client can call /v1/exec or /v1/chat/completions (or pass --demo on a loopback listener to generate one)")
	}
	return nil
}

// demoCredentials generates the admin token and the API key that were not given and prints them once on
// stderr: a hub to try on one machine. Only on a loopback listener: a generated secret in a log is no
// secret.
func demoCredentials(adminToken, apiKey *string, listenAddr string, stderr io.Writer) error {
	if !listen.IsLoopback(listenAddr) {
		return fmt.Errorf("--demo generates credentials and prints them: it is for a loopback listener only, not %s", listenAddr)
	}
	for _, p := range []*string{adminToken, apiKey} {
		if *p == "" {
			*p = bridge.NewSecret()
		}
	}
	fmt.Fprintf(stderr, "codellm hub: demo mode: these credentials are shown once (set them as CODELLM_HUB_ADMIN_TOKEN and CODELLM_HUB_API_KEY to keep them):\n"+
		"  admin token: %s\n  api key:     %s\n", *adminToken, *apiKey)
	return nil
}

// watchFeed makes another replica's changes (the Redis store's feed; nil for the embedded store) wake
// this replica's long polls and waiting clients at once instead of at the next poll tick. The returned
// func stops watching and waits for the watcher to end.
func watchFeed(ctx context.Context, feed *redisstore.Store, h *Hub) (stop func()) {
	if feed == nil {
		return func() {}
	}
	feedCtx, stopFeed := context.WithCancel(ctx)
	feedDone := make(chan struct{})
	go func() { defer close(feedDone); _ = feed.WatchChanges(feedCtx, h.ReplicaID(), h.Notify) }()
	return func() { stopFeed(); <-feedDone }
}

// checkListener is the hub's listener rule: a non-loopback address (internal/listen's rule) needs TLS or
// an operator's word that a TLS proxy is in front.
func checkListener(addr, cert, key string, behindProxy bool) error {
	if (cert == "") != (key == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if !listen.IsLoopback(addr) && cert == "" && !behindProxy {
		return fmt.Errorf("listening on non-loopback %s needs --tls-cert/--tls-key or --behind-proxy", addr)
	}
	return nil
}

// readClientKeys adds the --api-key (tenant "default") and the keys of --client-keys-file to cfg.
func readClientKeys(cfg *Config, apiKey, keysFile string) error {
	if apiKey != "" {
		cfg.ClientKeys = append(cfg.ClientKeys, ClientKey{Key: apiKey, TenantID: "default"})
	}
	if keysFile == "" {
		return nil
	}
	b, err := os.ReadFile(keysFile)
	if err != nil {
		return fmt.Errorf("client keys: %v", err)
	}
	var keys []ClientKey
	if err := json.Unmarshal(b, &keys); err != nil {
		return fmt.Errorf("client keys %s: %v", keysFile, err)
	}
	cfg.ClientKeys = append(cfg.ClientKeys, keys...)
	return nil
}

// readClientJWT enables signed client tokens when a public key or a JWKS is given.
func readClientJWT(cfg *Config, v *config.Values) error {
	jwks, pub := v.String("client-jwt-jwks"), v.String("client-jwt-public-key")
	if strings.TrimSpace(jwks) == "" && strings.TrimSpace(pub) == "" {
		return nil
	}
	keys, err := ParseClientJWTKeys(jwks, pub, v.String("client-jwt-kid"))
	if err != nil {
		return fmt.Errorf("CODELLM_HUB_CLIENT_JWT_*: %v", err)
	}
	cfg.ClientJWT = &ClientJWT{Issuer: v.String("client-jwt-issuer"), Audience: v.String("client-jwt-audience"), Keys: keys}
	if err := cfg.ClientJWT.check(); err != nil { // before anything is opened
		return fmt.Errorf("CODELLM_HUB_CLIENT_JWT_*: %v", err)
	}
	return nil
}

// applyLimits puts the environment-only limits that were given into cfg (limitSettings; each is
// positive, checked by the table); the others keep New's defaults.
func applyLimits(cfg *Config, v *config.Values) {
	for name, field := range limitFields(cfg) {
		if !v.IsSet(name) {
			continue
		}
		switch p := field.(type) {
		case *time.Duration:
			*p = v.Duration(name)
		case *int:
			*p = v.Int(name)
		case *int64:
			*p = v.Size(name)
		}
	}
}

// serveHTTP serves h on ln (TLS when cert is set) until ctx ends or SIGINT/SIGTERM, then shuts down:
// h first (waking long polls and waiting clients, so the drain does not sit out a 30 s lease wait), then
// the server within 10 s (internal/httpserve's sequence).
func serveHTTP(ctx context.Context, h *Hub, ln net.Listener, cert, key string, stderr io.Writer) error {
	scheme := "http"
	if cert != "" {
		scheme = "https"
	}
	fmt.Fprintf(stderr, "codellm hub: listening on %s://%s\n", scheme, ln.Addr())
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := httpserve.Serve(sigCtx, ln, h, h.serveOptions(cert, key))
	h.Close()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("serve: %v", err)
	}
	return nil
}

// serveOptions are the listener's: header, body and idle timeouts; a connection cap that is the sum of the
// kinds' caps, each kind held to its own by the hub (conns.go); settle bodies of up to 32 MiB get two
// minutes to arrive.
func (h *Hub) serveOptions(cert, key string) httpserve.Options {
	return httpserve.Options{Limits: httpguard.Limits{Body: 2 * time.Minute, MaxConns: h.conns.total()},
		CertFile: cert, KeyFile: key, Draining: h.Close, Grace: 10 * time.Second,
		ConnContext: h.conns.connContext, ConnState: h.conns.connState}
}

// openFiles opens the file store that goes with the state store: its index in the hub's own store
// (store.Backend: the bbolt file or the shared Redis), the bytes in the same Redis for replicas or in the
// directory "files" beside the embedded store's file.
func openFiles(ctx context.Context, st Store, redisURL, storePath string, l filestore.Limits) (filestore.Store, error) {
	withBackend, ok := st.(interface{ Backend() store.Backend })
	if !ok {
		return nil, errors.New("file store: the hub store exposes no record backend")
	}
	var blobs filestore.Blobs
	var err error
	if redisURL != "" {
		openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		blobs, err = filestore.OpenRedisBlobs(openCtx, redisURL)
	} else {
		blobs, err = filestore.OpenDirBlobs(filepath.Join(filepath.Dir(storePath), "files"))
	}
	if err != nil {
		return nil, err
	}
	return filestore.NewIndexed(withBackend.Backend(), blobs, l), nil
}

// storeTarget picks the store: --store redis://… (or CODELLM_HUB_STORE=redis
// with CODELLM_HUB_REDIS_URL) selects the shared store that lets several
// replicas serve one fleet; otherwise the embedded file at --store or under
// the data directory.
func storeTarget(storePath, kind, redisURL, dataDir string) (string, string, error) {
	switch {
	case isRedisURL(storePath):
		return storePath, "", nil
	case kind == "redis":
		if storePath != "" {
			return "", "", errors.New("CODELLM_HUB_STORE=redis takes its URL from CODELLM_HUB_REDIS_URL or --store redis://…, not a path")
		}
		if !isRedisURL(redisURL) {
			return "", "", fmt.Errorf("CODELLM_HUB_STORE=redis needs CODELLM_HUB_REDIS_URL=redis://HOST:PORT/DB (got %q)", redisURL)
		}
		return redisURL, "", nil
	case kind != "embedded":
		return "", "", fmt.Errorf("store %q is not available (embedded or redis)", kind)
	}
	if storePath != "" {
		return "", storePath, nil
	}
	dir := dataDir
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", fmt.Errorf("no --store and no home directory: %v", err)
		}
		dir = filepath.Join(home, ".local", "state", "codellm", "hub")
	}
	return "", filepath.Join(dir, "bridge.db"), nil
}

// openStore opens the selected store; the Redis one is also returned as the
// change feed and checked (checkRedis).
func openStore(ctx context.Context, redisURL, path string, allowEviction bool, stderr io.Writer) (Store, *redisstore.Store, error) {
	if redisURL == "" {
		bs, err := boltstore.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return bs, nil, nil
	}
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rs, err := redisstore.Open(openCtx, redisURL)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRedis(openCtx, rs, allowEviction, stderr); err != nil {
		_ = rs.Close()
		return nil, nil, err
	}
	return rs, rs, nil
}

// checkRedis refuses a Redis that may evict the store's keys (unless the
// operator insists) and warns when nothing persists the data or the
// settings cannot be read (docs/operator.md explains both).
func checkRedis(ctx context.Context, rs *redisstore.Store, allowEviction bool, stderr io.Writer) error {
	set, err := rs.Check(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "codellm hub: warning: cannot verify the Redis settings (%v); make sure maxmemory-policy is noeviction and AOF or RDB persistence is on\n", err)
		return nil
	}
	if !set.Safe() {
		if !allowEviction {
			return fmt.Errorf("redis maxmemory-policy is %q: an evicted nonce, fence or credential would silently weaken replay protection and fencing; set maxmemory-policy noeviction (or pass --redis-allow-eviction to start anyway)", set.EvictionPolicy)
		}
		fmt.Fprintf(stderr, "codellm hub: warning: redis maxmemory-policy is %q (--redis-allow-eviction): evicted keys weaken replay protection and fencing\n", set.EvictionPolicy)
	}
	if !set.Persistent() {
		fmt.Fprintln(stderr, "codellm hub: warning: redis has neither AOF (appendonly) nor RDB (save) persistence: a Redis restart loses every worker credential and each worker must be paired again")
	}
	return nil
}

func isRedisURL(s string) bool {
	return strings.HasPrefix(s, "redis://") || strings.HasPrefix(s, "rediss://")
}

// ReplicaID names this hub replica (the change feed's own channel is named after it).
func (h *Hub) ReplicaID() string { return h.replica.id }

// Notify wakes the requests waiting on topic (store.TopicWorker, …; "" wakes all) to re-read the store.
// A shared store's change feed calls it for the commits of other replicas; this replica's own are told
// through the backend's listener.
func (h *Hub) Notify(topic string) {
	if topic == store.TopicPools || topic == "" {
		h.pools.invalidate()
	}
	if topic == "" || strings.HasPrefix(topic, queueTopicPrefix) {
		h.queued.joined(topic)
	}
	h.waits.wake(store.SplitTopic(topic))
}

func adminCLI(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) int {
	fs := newFlagSet("hub "+cmd, stderr)
	(&config.Set{Settings: adminSettings()}).Register(fs)
	v, code := config.Parse(fs, args, families, lookup) // the worker ID before or after the flags
	if code >= 0 {
		return code
	}
	v.Warn(slog.New(slog.NewTextHandler(stderr, nil)))
	base, token, tenant, principal := v.String("url"), v.String("admin-token"), v.String("tenant"), v.String("principal")
	if fs.NArg() != 1 || !bridge.ValidWorkerID(fs.Arg(0)) {
		return config.UsageError(stderr, "hub "+cmd, errors.New("want one valid <workerId> (up to 128 characters of [A-Za-z0-9._:-], beginning with a letter or digit)"))
	}
	workerID := fs.Arg(0)
	url := strings.TrimRight(base, "/")
	var req *http.Request
	var err error
	switch cmd {
	case "pair":
		body := bridge.CreatePairingRequest{WorkerID: workerID}
		if tenant != "" || principal != "" {
			pt, pid, ok := strings.Cut(principal, ":")
			if tenant == "" || !ok {
				return config.UsageError(stderr, "hub pair", errors.New("--tenant T and --principal type:id go together"))
			}
			body.Binding = &bridge.Binding{TenantID: tenant, Principal: bridge.Principal{Type: pt, ID: pid}}
		}
		b, _ := bridge.Marshal(body)
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, url+bridge.PathPairings(), bytes.NewReader(b))
	case "revoke":
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, url+bridge.PathRevoke(workerID), nil)
	default:
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, url+bridge.PathStatus(workerID), nil)
	}
	if err != nil {
		fmt.Fprintf(stderr, "codellm hub %s: %v\n", cmd, err)
		return 1
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "codellm hub %s: %v\n", cmd, err)
		return 1
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		e := bridge.DecodeError(resp.StatusCode, out)
		fmt.Fprintf(stderr, "codellm hub %s: HTTP %d: %s\n", cmd, resp.StatusCode, e.Message)
		return 1
	}
	if cmd == "pair" {
		var pr bridge.CreatePairingResponse
		if err := json.Unmarshal(out, &pr); err != nil || pr.Code == "" {
			fmt.Fprintf(stderr, "codellm hub pair: malformed reply\n")
			return 1
		}
		fmt.Fprintln(stdout, pr.Code)
		return 0
	}
	fmt.Fprintln(stdout, string(out))
	return 0
}
