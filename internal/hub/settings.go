package hub

import (
	"flag"

	"github.com/codellm/codellm/internal/config"
)

// The hub's settings tables (internal/config): `codellm hub serve` and the admin commands register their
// flags from them, and read CODELLM_HUB_* first, then LIBRECHAT_CODE_HUB_*, then the reference's
// CODEAPI_BRIDGE_* names (bridge-protocol §12).

// families are the hub's alias families.
var families = []config.Family{config.LibreChat}

// bridgeAlias is the reference's (LibreChat's Code API) name for a hub variable.
func bridgeAlias(env string) []config.Alias {
	return []config.Alias{{Env: env, Family: "CODEAPI_BRIDGE"}}
}

// codeapiAlias is the Code API's own name for a hub variable (its JWT verifier's CODEAPI_JWT_*).
func codeapiAlias(env string) []config.Alias {
	return []config.Alias{{Env: env, Family: "CODEAPI"}}
}

var adminTokenSetting = config.Setting{Name: "admin-token", Env: "HUB_ADMIN_TOKEN", Kind: config.String, Secret: true,
	Usage: "admin bearer token (pairing, the admin routes, /metrics)"}

// serveSettings are `codellm hub serve`'s settings, its environment-only limits last.
func serveSettings() []config.Setting {
	return append([]config.Setting{
		{Name: "listen", Env: "HUB_LISTEN", Kind: config.String, Default: "127.0.0.1:8090", Usage: "listen address (non-loopback needs --tls-cert/--tls-key or --behind-proxy)"},
		adminTokenSetting,
		{Name: "api-key", Env: "HUB_API_KEY", Kind: config.String, Secret: true, Usage: "client API key (tenant \"default\")"},
		{Name: "store", Kind: config.String, FlagOnly: true, Usage: "embedded store file (default $CODELLM_HUB_DATA_DIR/bridge.db), or redis://HOST:PORT/DB for the shared Redis store"},
		{Name: "worker-token", Env: "HUB_WORKER_TOKEN", Kind: config.String, Secret: true, Aliases: bridgeAlias("CODEAPI_BRIDGE_TOKEN"), Usage: "static-mode worker token (default: the admin token)"},
		{Name: "auth-mode", Env: "HUB_AUTH_MODE", Kind: config.String, Default: AuthPaired, Aliases: bridgeAlias("CODEAPI_BRIDGE_AUTH_MODE"), Usage: "paired or static"},
		{Name: "client-keys-file", Env: "HUB_CLIENT_KEYS_FILE", Kind: config.String, Usage: "JSON file of client keys (tenant, principal, roles, groups)"},
		{Name: "worker-ids", Env: "HUB_WORKER_IDS", Kind: config.List, Usage: "comma-separated worker ID allow-list"},
		{Name: "dynamic-workers", Env: "HUB_DYNAMIC_WORKERS", Kind: config.Bool, Aliases: bridgeAlias("CODEAPI_BRIDGE_DYNAMIC_WORKERS"), Usage: "accept any worker ID (a binding is then required)"},
		{Name: "tls-cert", Env: "HUB_TLS_CERT", Kind: config.String, Usage: "TLS certificate file"},
		{Name: "tls-key", Env: "HUB_TLS_KEY", Kind: config.String, Usage: "TLS key file"},
		{Name: "behind-proxy", Env: "HUB_BEHIND_PROXY", Kind: config.Bool, Usage: "allow a non-loopback plain-HTTP listener behind a TLS proxy"},
		{Name: "demo", Kind: config.Bool, FlagOnly: true, Usage: "generate the admin token and API key that are not given and print them once (loopback listener only; to try the hub on one machine)"},
		{Name: "redis-allow-eviction", Env: "HUB_REDIS_ALLOW_EVICTION", Kind: config.Bool, Usage: "start even though Redis may evict keys (maxmemory-policy is not noeviction); see docs/operator.md"},
		{Name: "client-jwt-public-key", Env: "HUB_CLIENT_JWT_PUBLIC_KEY", Kind: config.String, EnvOnly: true, Aliases: codeapiAlias("CODEAPI_JWT_PUBLIC_KEY"), Usage: "public key (PEM or JWK, Ed25519 or RSA) of LibreChat's signed per-user client tokens; enables them beside the API keys"},
		{Name: "client-jwt-kid", Env: "HUB_CLIENT_JWT_KID", Kind: config.String, EnvOnly: true, Default: DefaultClientJWTKID, Aliases: codeapiAlias("CODEAPI_JWT_KID"), Usage: "kid of CODELLM_HUB_CLIENT_JWT_PUBLIC_KEY"},
		{Name: "client-jwt-jwks", Env: "HUB_CLIENT_JWT_JWKS", Kind: config.String, EnvOnly: true, Aliases: codeapiAlias("CODEAPI_JWT_JWKS_JSON"), Usage: "JWKS ({\"keys\":[…]}, each with its kid) of signed client tokens, for key rotation"},
		{Name: "client-jwt-issuer", Env: "HUB_CLIENT_JWT_ISSUER", Kind: config.String, EnvOnly: true, Default: DefaultClientJWTIssuer, Aliases: codeapiAlias("CODEAPI_JWT_ISSUER"), Usage: "iss a signed client token must carry"},
		{Name: "client-jwt-audience", Env: "HUB_CLIENT_JWT_AUDIENCE", Kind: config.String, EnvOnly: true, Default: DefaultClientJWTAudience, Aliases: codeapiAlias("CODEAPI_JWT_AUDIENCE"), Usage: "aud a signed client token must carry"},
		{Name: "signed-path-prefix", Env: "HUB_SIGNED_PATH_PREFIX", Kind: config.String, EnvOnly: true, Usage: "prefix a proxy strips from worker request paths, prepended before verifying signatures"},
		{Name: "store-kind", Env: "HUB_STORE", Kind: config.String, EnvOnly: true, Default: "embedded", Usage: "embedded or redis (then CODELLM_HUB_REDIS_URL)"},
		{Name: "redis-url", Env: "HUB_REDIS_URL", Kind: config.String, EnvOnly: true, Usage: "redis://HOST:PORT/DB of the shared store"},
		{Name: "data-dir", Env: "HUB_DATA_DIR", Kind: config.String, EnvOnly: true, Usage: "directory of the embedded store (default ~/.local/state/codellm/hub)"},
		{Name: "rate-limits", Env: "HUB_RATE_LIMITS", Kind: config.String, EnvOnly: true, Default: "on", Usage: "on or off: per-caller rate limits of /v1/exec and the file routes (CODELLM_HUB_*_RATE_*)"},
	}, limitSettings()...)
}

// limit is one of the hub's environment-only limits, all positive. def is New's default (Config.defaults;
// TestLimitDefaultsAreNews keeps them equal).
func limit(env string, kind config.Kind, def, usage string) config.Setting {
	return config.Setting{Name: env, Env: env, Kind: kind, EnvOnly: true, Positive: true, Default: def, Usage: usage}
}

// limitSettings are the hub's environment-only limits; each unset one keeps New's default.
func limitSettings() []config.Setting {
	return []config.Setting{
		limit("HUB_CREDENTIAL_TTL", config.Duration, "5m", "worker credential lifetime (at least 3m: a worker refreshes 2 minutes ahead)"),
		limit("HUB_PAIRING_TTL", config.Duration, "10m", "pairing code lifetime"),
		limit("HUB_EXEC_TIMEOUT", config.Duration, "5m", "deadline of a /v1/exec request (upstream JOB_TIMEOUT)"),
		limit("HUB_CHAT_TIMEOUT", config.Duration, "2m", "deadline of a chat request"),
		limit("HUB_MAX_TIMEOUT", config.Duration, "10m", "the most X-Codellm-Timeout-Ms may raise a deadline to"),
		limit("HUB_QUEUE_TIMEOUT", config.Duration, "30s", "longest wait for a busy worker (then 429) or for one to come online (then 503)"),
		limit("HUB_QUEUE_MAX", config.Int, "100", "waiting requests per tenant"),
		limit("HUB_IDEMPOTENCY_TTL", config.Duration, "10m", "replay window of Idempotency-Key responses"),
		limit("HUB_FILE_TTL", config.Duration, "24h", "lifetime of uploaded files"),
		limit("HUB_MAX_BODY", config.Size, "1MiB", "client request body"),
		limit("HUB_MAX_SETTLE_BODY", config.Size, "32MiB", "worker settle body"),
		limit("HUB_MAX_FILE_BYTES", config.Size, "25MiB", "one uploaded file (upstream MAX_FILE_SIZE)"),
		limit("HUB_MAX_SESSION_FILE_BYTES", config.Size, "100MiB", "all files of a session"),
		limit("HUB_MAX_FILE_STORE_BYTES", config.Size, "2GiB", "all files together"),
		limit("HUB_MAX_EXEC_INPUT_BYTES", config.Size, "25MiB", "input files of one /v1/exec together (one file of the largest size fits)"),
		limit("HUB_MAX_WORKER_CONNECTIONS", config.Int, "4096", "connections of authenticated workers (one per waiting lease slot); more get 503 connection_limit"),
		limit("HUB_MAX_CLIENT_CONNECTIONS", config.Int, "1024", "connections of authenticated clients and admins; more get 503 connection_limit"),
		limit("HUB_MAX_PENDING_CONNECTIONS", config.Int, "256", "connections not yet authenticated; past it the oldest is closed"),
		limit("HUB_MAX_TENANT_FILE_BYTES", config.Size, "1GiB", "all files of one tenant (API key's tenantId) together"),
		limit("HUB_MAX_UPLOAD_MEMORY", config.Size, "256MiB", "upload bytes all requests hold in memory at once; past it an upload gets 503 upload_busy"),
		limit("HUB_EXEC_RATE_MAX", config.Int, "20", "/v1/exec requests of one caller (API key's tenant and user) per CODELLM_HUB_EXEC_RATE_WINDOW; more get 429 rate_limited"),
		limit("HUB_EXEC_RATE_WINDOW", config.Duration, "30s", "window of CODELLM_HUB_EXEC_RATE_MAX"),
		limit("HUB_UPLOAD_RATE_MAX", config.Int, "30", "uploads (/v1/upload, /v1/upload/batch) of one caller per CODELLM_HUB_UPLOAD_RATE_WINDOW"),
		limit("HUB_UPLOAD_RATE_WINDOW", config.Duration, "5m", "window of CODELLM_HUB_UPLOAD_RATE_MAX"),
		limit("HUB_DOWNLOAD_RATE_MAX", config.Int, "60", "downloads of one caller per CODELLM_HUB_DOWNLOAD_RATE_WINDOW"),
		limit("HUB_DOWNLOAD_RATE_WINDOW", config.Duration, "1m", "window of CODELLM_HUB_DOWNLOAD_RATE_MAX"),
		limit("HUB_LIST_RATE_MAX", config.Int, "120", "file listings (GET /v1/files/{session}) of one caller per CODELLM_HUB_LIST_RATE_WINDOW"),
		limit("HUB_LIST_RATE_WINDOW", config.Duration, "1m", "window of CODELLM_HUB_LIST_RATE_MAX"),
	}
}

// limitFields are the Config fields of limitSettings, by setting name.
func limitFields(c *Config) map[string]any {
	return map[string]any{
		"HUB_CREDENTIAL_TTL": &c.CredentialTTL, "HUB_PAIRING_TTL": &c.PairingTTL, "HUB_EXEC_TIMEOUT": &c.ExecTimeout,
		"HUB_CHAT_TIMEOUT": &c.ChatTimeout, "HUB_MAX_TIMEOUT": &c.MaxTimeout, "HUB_QUEUE_TIMEOUT": &c.QueueTimeout,
		"HUB_QUEUE_MAX": &c.QueueMax, "HUB_IDEMPOTENCY_TTL": &c.IdempotencyTTL, "HUB_FILE_TTL": &c.FileLimits.TTL,
		"HUB_MAX_BODY": &c.MaxBody, "HUB_MAX_SETTLE_BODY": &c.MaxSettleBody, "HUB_MAX_FILE_BYTES": &c.FileLimits.MaxFileBytes,
		"HUB_MAX_SESSION_FILE_BYTES": &c.FileLimits.MaxSessionBytes, "HUB_MAX_FILE_STORE_BYTES": &c.FileLimits.MaxTotalBytes,
		"HUB_MAX_EXEC_INPUT_BYTES": &c.MaxExecInputBytes, "HUB_MAX_WORKER_CONNECTIONS": &c.MaxWorkerConnections,
		"HUB_MAX_CLIENT_CONNECTIONS": &c.MaxClientConnections, "HUB_MAX_PENDING_CONNECTIONS": &c.MaxPendingConnections,
		"HUB_MAX_UPLOAD_MEMORY": &c.MaxUploadMemory, "HUB_MAX_TENANT_FILE_BYTES": &c.FileLimits.MaxTenantBytes,
		"HUB_EXEC_RATE_MAX": &c.RateLimits.Exec.Max, "HUB_EXEC_RATE_WINDOW": &c.RateLimits.Exec.Window,
		"HUB_UPLOAD_RATE_MAX": &c.RateLimits.Upload.Max, "HUB_UPLOAD_RATE_WINDOW": &c.RateLimits.Upload.Window,
		"HUB_DOWNLOAD_RATE_MAX": &c.RateLimits.Download.Max, "HUB_DOWNLOAD_RATE_WINDOW": &c.RateLimits.Download.Window,
		"HUB_LIST_RATE_MAX": &c.RateLimits.Listing.Max, "HUB_LIST_RATE_WINDOW": &c.RateLimits.Listing.Window,
	}
}

// adminSettings are the settings of `codellm hub pair|revoke|status`.
func adminSettings() []config.Setting {
	return []config.Setting{
		{Name: "url", Env: "HUB_URL", Kind: config.String, Default: "http://127.0.0.1:8090/v1", Usage: "hub base URL"},
		adminTokenSetting,
		{Name: "tenant", Kind: config.String, FlagOnly: true, Usage: "binding tenant (pair)"},
		{Name: "principal", Kind: config.String, FlagOnly: true, Usage: "binding principal type:id (pair)"},
	}
}

// SettingsReference registers the hub's tables into fresh FlagSets, for the generated docs: serve's, then
// the admin commands'. Families are the hub's.
func SettingsReference() (serve, admin *flag.FlagSet, fams []config.Family) {
	serve, admin = flag.NewFlagSet("hub serve", flag.ContinueOnError), flag.NewFlagSet("hub pair", flag.ContinueOnError)
	(&config.Set{Settings: serveSettings()}).Register(serve)
	(&config.Set{Settings: adminSettings()}).Register(admin)
	return serve, admin, families
}
