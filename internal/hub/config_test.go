package hub

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/config"
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
	} {
		var stderr bytes.Buffer
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		code := runCLI(context.Background(), []string{"serve", "--listen", c.listen, "--admin-token", adminToken, "--store", store}, &stderr, &stderr, lookup)
		out := stderr.String()
		// A bad value is a usage error (exit 2, naming the variable), as for every command (internal/config);
		// a check that fails later is 1.
		bad := c.env != nil && c.want != "" // the rows whose variable holds a bad value
		if want := map[bool]int{true: 2, false: 1}[bad]; code != want {
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
