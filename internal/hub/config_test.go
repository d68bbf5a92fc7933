package hub

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/config"
	"github.com/codellm/codellm/internal/testhelp"
)

// The hub reads listen addresses and sizes with codellm's one rule each (internal/listen,
// internal/bytesize). Issue 15: the hub refused LOCALHOST:1 (which serve accepts) and 64M / 10MB. Each
// case runs serve up to opening its store, which is made to fail (a path under a regular file), so the
// error says which check stopped it.
func TestServeConfigRules(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	store := filepath.Join(file, "bridge.db")
	for _, c := range []struct {
		listen string
		env    map[string]string
		want   string // a fragment of the error; "" for "got as far as the store"
	}{
		{"127.0.0.1:1", nil, ""},
		{"LOCALHOST:1", nil, ""},
		{"localhost:1", nil, ""},
		{"127.0.0.2:1", nil, ""},
		{"[::1]:1", nil, ""},
		{"[::ffff:127.0.0.1]:1", nil, ""},
		{"0.0.0.0:1", nil, "non-loopback"},
		{"[::]:1", nil, "non-loopback"},
		{"localhost.example:1", nil, "non-loopback"},
		{"192.168.1.1:1", nil, "non-loopback"},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_MAX_BODY": "64M"}, ""},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_MAX_BODY": "10MB"}, ""},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_MAX_BODY": "64MiB"}, ""},
		{"127.0.0.1:1", map[string]string{"LIBRECHAT_CODE_HUB_MAX_FILE_BYTES": "1 GiB"}, ""},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_MAX_BODY": "0"}, "CODELLM_HUB_MAX_BODY"},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_MAX_BODY": "64X"}, "CODELLM_HUB_MAX_BODY"},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_MAX_BODY": "1.5MiB"}, "CODELLM_HUB_MAX_BODY"},
		// Issue 40 item 11: a credential a worker refreshes 2 minutes ahead must outlive that, or the worker
		// exits on its first refresh and gets 401 for good (worker's TestMinCredentialTTL).
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_CREDENTIAL_TTL": "90s"}, "CODELLM_HUB_CREDENTIAL_TTL is 1m30s, under the minimum 3m0s"},
		{"127.0.0.1:1", map[string]string{"LIBRECHAT_CODE_HUB_CREDENTIAL_TTL": "2m"}, "under the minimum 3m0s"},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_CREDENTIAL_TTL": "3m"}, ""},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_CREDENTIAL_TTL": "15m"}, ""},
		// Issue 40 item 8: the per-caller rate limits' switch.
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_RATE_LIMITS": "off"}, ""},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_RATE_LIMITS": "on"}, ""},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_RATE_LIMITS": "sometimes"}, `CODELLM_HUB_RATE_LIMITS is "sometimes": use on`},
		{"127.0.0.1:1", map[string]string{"CODELLM_HUB_EXEC_RATE_MAX": "0"}, "CODELLM_HUB_EXEC_RATE_MAX"},
	} {
		var stderr bytes.Buffer
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		code := runCLI(context.Background(), []string{"serve", "--listen", c.listen, "--admin-token", adminToken, "--api-key", apiKey, "--store", store}, &stderr, &stderr, lookup)
		out := stderr.String()
		// A bad value or a listener the rule refuses is a usage error (exit 2, naming the setting), as for
		// every command (internal/config); a store that cannot be opened is the host's (6).
		if want := map[bool]int{true: 2, false: 6}[c.want != ""]; code != want {
			t.Fatalf("%s %v: exit %d, want %d: %s", c.listen, c.env, code, want, out)
		}
		storeErr := strings.Contains(out, "not a directory")
		if c.want == "" && !storeErr || c.want != "" && (storeErr || !strings.Contains(out, c.want)) {
			t.Errorf("%s %v: want %q, got %s", c.listen, c.env, c.want, out)
		}
	}
}

// The table's defaults of the environment-only limits are New's (Config.defaults): --help and
// docs/operator.md §9 show them, New applies its own, and they must not drift apart.
func TestLimitDefaultsAreNews(t *testing.T) {
	var c Config
	c.defaults()
	v, err := config.LoadSets(flag.NewFlagSet("t", flag.ContinueOnError), families, func(string) (string, bool) { return "", false },
		&config.Set{Settings: limitSettings()})
	if err != nil {
		t.Fatal(err)
	}
	fields := limitFields(&c)
	for _, st := range limitSettings() {
		var table any
		switch st.Kind {
		case config.Duration:
			table = v.Duration(st.Name)
		case config.Int:
			table = v.Int(st.Name)
		case config.Size:
			table = v.Size(st.Name)
		}
		got := reflect.ValueOf(fields[st.Name]).Elem().Interface()
		if got != table {
			t.Errorf("%s: the table says %v, New applies %v", st.EnvName(), table, got)
		}
	}
	if len(fields) != len(limitSettings()) {
		t.Errorf("%d fields for %d limits", len(fields), len(limitSettings()))
	}
}

// Issue 41: a bare `codellm hub` started a hub with no admin token and no client key that reported ready;
// pairing then failed naming no setting. serve now refuses, naming the variable, before it opens
// anything, and --demo (loopback only) generates both and prints them once.
func TestServeRequiresCredentials(t *testing.T) {
	store := filepath.Join(t.TempDir(), "bridge.db")
	none := func(string) (string, bool) { return "", false }
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no admin token: set CODELLM_HUB_ADMIN_TOKEN"},
		{[]string{"--admin-token", adminToken}, "no client key: set CODELLM_HUB_API_KEY"},
		{[]string{"--demo", "--listen", "0.0.0.0:0", "--behind-proxy"}, "loopback listener only"},
	} {
		var stderr bytes.Buffer
		code := runCLI(context.Background(), append([]string{"serve", "--store", store}, c.args...), &stderr, &stderr, none)
		if code != config.ExitUsage || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), "listening") {
			t.Errorf("%q: exit %d, want 2 and %q in %q", c.args, code, c.want, stderr.String())
		}
		if _, err := os.Stat(store); err == nil {
			t.Fatalf("%q: the refused hub created its store", c.args)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testhelp.SyncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runCLI(ctx, []string{"--demo", "--listen", "127.0.0.1:0", "--store", store}, out, out, none)
	}()
	var base, token, key string
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s := out.String()
		_, rest, ok := strings.Cut(s, "listening on ")
		if !ok {
			continue
		}
		base = strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
		token = field(s, "admin token: ")
		key = field(s, "api key:     ")
	}
	if base == "" || len(token) < 32 || len(key) < 32 || token == key {
		t.Fatalf("demo hub: url %q, token %q, key %q in:\n%s", base, token, key, out.String())
	}
	// The printed token pairs (the admin route), the printed key is a client's.
	var o bytes.Buffer
	look := func(k string) (string, bool) {
		return map[string]string{"CODELLM_HUB_URL": base + "/v1"}[k], k == "CODELLM_HUB_URL"
	}
	if rc := runCLI(ctx, []string{"pair", "demo:vm", "--admin-token", token}, &o, &o, look); rc != 0 {
		t.Fatalf("pair with the printed token: %d %s", rc, o.String())
	}
	status := func(k string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/files/none", nil)
		req.Header.Set("X-API-Key", k)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got, other := status(key), status(key+"x"); got == http.StatusUnauthorized || other != http.StatusUnauthorized {
		t.Fatalf("the printed API key: %d, another key: %d (want it accepted, the other 401)", got, other)
	}
	cancel()
	if rc := <-done; rc != 0 {
		t.Fatalf("demo hub exit %d: %s", rc, out.String())
	}
}

// field is the rest of the line after prefix in s ("" when absent).
func field(s, prefix string) string {
	_, rest, ok := strings.Cut(s, prefix)
	if !ok {
		return ""
	}
	return strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0])
}

// Signed client tokens are read from CODELLM_HUB_CLIENT_JWT_* or the Code API's CODEAPI_JWT_* names: a
// public key alone is enough client authentication to start (no API key needed), a bad key is a usage
// error naming the settings. Each run stops at opening its store (a path under a regular file).
func TestServeSignedTokenSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(testEdKey.Public())
	pub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	for _, c := range []struct {
		env  map[string]string
		want string // "" for "got as far as the store"
	}{
		{map[string]string{"CODELLM_HUB_CLIENT_JWT_PUBLIC_KEY": pub}, ""},
		{map[string]string{"CODEAPI_JWT_PUBLIC_KEY": pub, "CODEAPI_JWT_KID": "k1"}, ""},
		{map[string]string{"CODEAPI_JWT_JWKS_JSON": `{"keys":[]}`}, "signed client tokens need at least one public key"},
		{map[string]string{"CODELLM_HUB_CLIENT_JWT_PUBLIC_KEY": "not a key"}, "CODELLM_HUB_CLIENT_JWT_*: client token public key"},
		{nil, "no client key"},
	} {
		var stderr bytes.Buffer
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		code := runCLI(context.Background(), []string{"serve", "--listen", "127.0.0.1:1", "--admin-token", adminToken, "--store", filepath.Join(file, "bridge.db")}, &stderr, &stderr, lookup)
		out := stderr.String()
		storeErr := strings.Contains(out, "not a directory")
		if c.want == "" && (code != 6 || !storeErr) || c.want != "" && (code != 2 || !strings.Contains(out, c.want)) {
			t.Errorf("%v: exit %d: %s (want %q)", c.env, code, out, c.want)
		}
	}
}
