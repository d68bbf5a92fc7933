package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// testSet has one setting of each kind and each kind of spelling: a trip2g alias flag and variable
// (with its "0 means default"), a LibreChat family, a reference variable, an empty-is-a-value setting,
// a family opt-out, a secret and an environment-only positive size.
func testSet() *Set {
	noEmpty := func(v string) error {
		if v == "" {
			return errors.New("an empty prefix would expose everything")
		}
		return nil
	}
	return &Set{Settings: []Setting{
		{Name: "listen", Kind: String, Default: "127.0.0.1:8080", Usage: "listen address",
			Aliases: []Alias{{Flag: "addr", Env: "CODELLM_ADDR", Family: "trip2g"}}},
		{Name: "max-output-bytes", Kind: Size, Default: "10MiB", Usage: "stdout cap",
			Aliases: []Alias{{Flag: "max-stdout-bytes", Env: "CODELLM_MAX_STDOUT_BYTES", Family: "trip2g", Unset: "0"}}},
		{Name: "network", Kind: Bool, Usage: "network", Aliases: []Alias{{Env: "CODELLM_SANDBOX_NETWORK", Family: "trip2g"}}},
		{Name: "timeout", Kind: Duration, Default: "300s", Usage: "timeout", Positive: true},
		{Name: "max-blocks", Kind: Int, Default: "64", Usage: "blocks"},
		{Name: "expose-env", Kind: List, Usage: "variables"},
		{Name: "expose-env-prefix", Kind: List, Usage: "prefixes", Check: noEmpty},
		{Name: "allowed-programs", Kind: String, Usage: "programs", EmptyIsValue: true},
		{Name: "sandbox", Kind: String, Default: "native", Usage: "mode", NoFamilies: true},
		{Name: "worker-token", Env: "HUB_WORKER_TOKEN", Kind: String, Usage: "token", Secret: true,
			Aliases: []Alias{{Env: "CODEAPI_BRIDGE_TOKEN", Family: "CODEAPI_BRIDGE"}}},
		{Name: "tenant", Kind: String, FlagOnly: true, Usage: "per-call argument"},
		{Name: "peer", Env: "SANDBOX_EXTERNAL_X", EnvExact: true, EnvOnly: true, Kind: Bool, Usage: "a peer's variable"},
		{Name: "hub-max-body", Env: "HUB_MAX_BODY", Kind: Size, Default: "1MiB", Usage: "body", EnvOnly: true, Positive: true},
	}}
}

func load(args []string, env map[string]string) (*Values, string, error) {
	s := testSet()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.Register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, "", err
	}
	v, err := Load(fs, []Family{LibreChat}, func(k string) (string, bool) { x, ok := env[k]; return x, ok })
	if err != nil {
		return nil, "", err
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	v.Warn(log)
	v.Warn(log) // warnings are logged once: the callers' counts below would see a second copy
	return v, logs.String(), nil
}

func TestLoad(t *testing.T) {
	type env = map[string]string
	str := func(n string) func(*Values) any { return func(v *Values) any { return v.String(n) } }
	size := func(v *Values) any { return v.Size("max-output-bytes") }
	for _, c := range []struct {
		name  string
		args  []string
		env   env
		get   func(*Values) any
		want  any
		warn  string // "" none; otherwise a fragment of the one warning
		err   string // a fragment of the error
		isSet string // a setting that must be reported as set
	}{
		// precedence
		{name: "default", get: str("listen"), want: "127.0.0.1:8080"},
		{name: "CODELLM_ over default", env: env{"CODELLM_LISTEN": "a:1"}, get: str("listen"), want: "a:1", isSet: "listen"},
		{name: "flag over CODELLM_", args: []string{"--listen", "f:1"}, env: env{"CODELLM_LISTEN": "a:1"}, get: str("listen"), want: "f:1",
			warn: "--listen and CODELLM_LISTEN differ; using codellm's --listen"},
		{name: "alias flag over CODELLM_ (the command line wins)", args: []string{"-addr", "t:1"}, env: env{"CODELLM_LISTEN": "a:1"},
			get: str("listen"), want: "t:1", warn: "-addr and CODELLM_LISTEN differ"},
		{name: "our flag over the alias flag", args: []string{"-addr", "t:1", "--listen", "f:1"}, get: str("listen"), want: "f:1",
			warn: "--listen and -addr differ; using codellm's --listen"},
		{name: "CODELLM_ over trip2g's variable", env: env{"CODELLM_LISTEN": "a:1", "CODELLM_ADDR": "t:1"}, get: str("listen"), want: "a:1",
			warn: "CODELLM_LISTEN and CODELLM_ADDR differ; using codellm's CODELLM_LISTEN"},
		{name: "trip2g's variable alone", env: env{"CODELLM_ADDR": "t:1"}, get: str("listen"), want: "t:1"},
		{name: "CODELLM_ over LIBRECHAT_CODE_", env: env{"CODELLM_SANDBOX": "off", "CODELLM_LISTEN": "a:1", "LIBRECHAT_CODE_LISTEN": "l:1"},
			get: str("listen"), want: "a:1", warn: "CODELLM_LISTEN and LIBRECHAT_CODE_LISTEN differ"},
		{name: "LIBRECHAT_CODE_ over trip2g's", env: env{"LIBRECHAT_CODE_LISTEN": "l:1", "CODELLM_ADDR": "t:1"}, get: str("listen"), want: "l:1",
			warn: "using LibreChat's LIBRECHAT_CODE_LISTEN"},
		{name: "family opt-out", env: env{"LIBRECHAT_CODE_SANDBOX": "off"}, get: str("sandbox"), want: "native"},
		{name: "hub variable over the reference's", env: env{"CODELLM_HUB_WORKER_TOKEN": "a", "CODEAPI_BRIDGE_TOKEN": "b"},
			get: str("worker-token"), want: "a", warn: "CODELLM_HUB_WORKER_TOKEN and CODEAPI_BRIDGE_TOKEN differ"},
		{name: "LIBRECHAT_CODE_ over the reference's", env: env{"LIBRECHAT_CODE_HUB_WORKER_TOKEN": "a", "CODEAPI_BRIDGE_TOKEN": "b"},
			get: str("worker-token"), want: "a", warn: "LIBRECHAT_CODE_HUB_WORKER_TOKEN and CODEAPI_BRIDGE_TOKEN differ"},
		{name: "the reference's alone", env: env{"CODEAPI_BRIDGE_TOKEN": "b"}, get: str("worker-token"), want: "b", isSet: "worker-token"},
		{name: "flag-only reads no variable", env: env{"CODELLM_TENANT": "t"}, get: str("tenant"), want: ""},
		{name: "flag-only flag", args: []string{"--tenant", "t"}, get: str("tenant"), want: "t"},
		{name: "exact variable", env: env{"SANDBOX_EXTERNAL_X": "1"}, get: func(v *Values) any { return v.Bool("peer") }, want: true, isSet: "peer"},
		{name: "exact: no CODELLM_ or family spelling", env: env{"CODELLM_SANDBOX_EXTERNAL_X": "1", "LIBRECHAT_CODE_SANDBOX_EXTERNAL_X": "1"}, get: func(v *Values) any { return v.Bool("peer") }, want: false},
		// empty values
		{name: "empty variable is unset", env: env{"CODELLM_LISTEN": "", "CODELLM_ADDR": "t:1"}, get: str("listen"), want: "t:1"},
		{name: "empty variable keeps the default", env: env{"CODELLM_TIMEOUT": ""}, get: func(v *Values) any { return v.Duration("timeout") }, want: 300 * time.Second},
		{name: "empty is a value where the setting says so", env: env{"CODELLM_ALLOWED_PROGRAMS": ""}, get: str("allowed-programs"), want: "", isSet: "allowed-programs"},
		{name: "empty flag is a value", args: []string{"--listen="}, env: env{"CODELLM_LISTEN": "a:1"}, get: str("listen"), want: "", warn: "differ"},
		{name: "empty prefix refused", args: []string{"--expose-env-prefix="}, err: "an empty prefix"},
		{name: "empty prefix variable is unset", env: env{"CODELLM_EXPOSE_ENV_PREFIX": ""}, get: func(v *Values) any { return v.List("expose-env-prefix") }, want: []string{}},
		// meaning-based comparison: same value, other spelling: no warning
		{name: "64M is 64MiB", env: env{"CODELLM_MAX_OUTPUT_BYTES": "64M", "CODELLM_MAX_STDOUT_BYTES": "64MiB"}, get: size, want: int64(64 << 20)},
		{name: "sizes differ", env: env{"CODELLM_MAX_OUTPUT_BYTES": "64MB", "CODELLM_MAX_STDOUT_BYTES": "64MiB"}, get: size, want: int64(64e6),
			warn: "CODELLM_MAX_OUTPUT_BYTES and CODELLM_MAX_STDOUT_BYTES differ"},
		{name: "1 is true", env: env{"CODELLM_NETWORK": "1", "CODELLM_SANDBOX_NETWORK": "true"}, get: func(v *Values) any { return v.Bool("network") }, want: true},
		{name: "trip2g's 0 is its default", args: []string{"-max-stdout-bytes", "0"}, get: size, want: int64(10 << 20)},
		{name: "trip2g's size", env: env{"CODELLM_MAX_STDOUT_BYTES": "65536"}, get: size, want: int64(65536), isSet: "max-output-bytes"},
		// sizes, durations, ints, lists
		{name: "size 10MB", args: []string{"--max-output-bytes", "10MB"}, get: size, want: int64(10e6)},
		{name: "size 1 GiB", env: env{"CODELLM_MAX_OUTPUT_BYTES": "1 GiB"}, get: size, want: int64(1 << 30)},
		{name: "duration", env: env{"CODELLM_TIMEOUT": "1m30s"}, get: func(v *Values) any { return v.Duration("timeout") }, want: 90 * time.Second},
		{name: "1m is 60s", args: []string{"--timeout", "1m"}, env: env{"CODELLM_TIMEOUT": "60s"}, get: func(v *Values) any { return v.Duration("timeout") }, want: time.Minute},
		{name: "int", env: env{"CODELLM_MAX_BLOCKS": "1"}, get: func(v *Values) any { return v.Int("max-blocks") }, want: 1},
		{name: "list repeated and comma-separated", args: []string{"--expose-env", "A,B", "--expose-env", " C ,"}, get: func(v *Values) any { return v.List("expose-env") }, want: []string{"A", "B", "C"}},
		{name: "list from env", env: env{"LIBRECHAT_CODE_EXPOSE_ENV": "A,,B"}, get: func(v *Values) any { return v.List("expose-env") }, want: []string{"A", "B"}},
		{name: "bool flag without value", args: []string{"--network"}, get: func(v *Values) any { return v.Bool("network") }, want: true},
		{name: "env-only size", env: env{"LIBRECHAT_CODE_HUB_MAX_BODY": "64M"}, get: func(v *Values) any { return v.Size("hub-max-body") }, want: int64(64 << 20)},
		// errors name the spelling, the value and the setting
		{name: "bad size", env: env{"CODELLM_MAX_STDOUT_BYTES": "64X"}, err: `CODELLM_MAX_STDOUT_BYTES="64X" (--max-output-bytes): invalid size unit`},
		{name: "bad bool", env: env{"CODELLM_SANDBOX_NETWORK": "yes please"}, err: `CODELLM_SANDBOX_NETWORK="yes please" (--network): want true or false`},
		{name: "bad duration", env: env{"LIBRECHAT_CODE_TIMEOUT": "5"}, err: `LIBRECHAT_CODE_TIMEOUT="5" (--timeout): want a duration`},
		{name: "not positive", env: env{"CODELLM_HUB_MAX_BODY": "0"}, err: `CODELLM_HUB_MAX_BODY="0": must be positive`},
		{name: "bad int", env: env{"CODELLM_MAX_BLOCKS": "many"}, err: `CODELLM_MAX_BLOCKS="many" (--max-blocks): want a whole number`},
		{name: "bad flag", args: []string{"--max-output-bytes", "1.5MiB"}, err: `invalid value "1.5MiB" for flag -max-output-bytes`},
		{name: "secret redacted", env: env{"CODEAPI_BRIDGE_TOKEN": "x"}, args: []string{"--worker-token", "y"}, get: str("worker-token"), want: "y",
			warn: "--worker-token and CODEAPI_BRIDGE_TOKEN differ"},
		// a bad lower spelling does not stop the one that wins; it is warned about
		{name: "bad loser", env: env{"CODELLM_TIMEOUT": "10s", "LIBRECHAT_CODE_TIMEOUT": "10000"}, get: func(v *Values) any { return v.Duration("timeout") }, want: 10 * time.Second,
			warn: "ignored_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, logs, err := load(c.args, c.env)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.get(v); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", c.want) {
				t.Errorf("got %#v, want %#v", got, c.want)
			}
			if n := strings.Count(logs, "level=WARN"); c.warn == "" && n != 0 || c.warn != "" && (n != 1 || !strings.Contains(logs, c.warn)) {
				t.Errorf("warnings %q, want %q", logs, c.warn)
			}
			if strings.Contains(logs, `value=x`) || strings.Contains(logs, `value=y`) {
				t.Errorf("a secret was logged: %s", logs)
			}
			if c.isSet != "" && !v.IsSet(c.isSet) {
				t.Errorf("%s not reported as set", c.isSet)
			}
		})
	}
}

// The error of a bad value is an *Error naming each part, and says nothing of a secret.
func TestErrorParts(t *testing.T) {
	_, _, err := load(nil, map[string]string{"LIBRECHAT_CODE_HUB_MAX_BODY": "-1"})
	var e *Error
	if !errors.As(err, &e) || e.Spelling != "LIBRECHAT_CODE_HUB_MAX_BODY" || e.Setting != "CODELLM_HUB_MAX_BODY" || e.Value != `"-1"` {
		t.Fatalf("%#v", err)
	}
	s := &Set{Settings: []Setting{{Name: "n", Kind: Int, Secret: true}}}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	s.Register(fs)
	_, err = Load(fs, nil, func(string) (string, bool) { return "hunter2", true })
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "CODELLM_N=<redacted>") {
		t.Fatalf("%v", err)
	}
}

// --help comes from the table: each flag once, its default once, every other spelling, the
// environment-only settings and the precedence rule; a secret's default is never shown.
func TestUsage(t *testing.T) {
	var b bytes.Buffer
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	testSet().Register(fs)
	Usage(&b, fs, []Family{LibreChat})
	out := b.String()
	for _, want := range []string{
		"--max-output-bytes SIZE (default 10MiB)",
		"also: -max-stdout-bytes, CODELLM_MAX_OUTPUT_BYTES, LIBRECHAT_CODE_MAX_OUTPUT_BYTES, CODELLM_MAX_STDOUT_BYTES",
		"--network\n", "also: CODELLM_SANDBOX\n",
		"Environment only:\n  SANDBOX_EXTERNAL_X=BOOL\n", "  CODELLM_HUB_MAX_BODY=SIZE (default 1MiB)",
		"The command line wins, then CODELLM_*, then LIBRECHAT_CODE_*, then the other spellings",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "(default 10MiB)") != 1 || strings.Contains(out, "--hub-max-body") {
		t.Errorf("usage:\n%s", out)
	}
}

// Markdown lists every setting with every spelling in precedence order (docs/operator.md's reference).
func TestMarkdown(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	testSet().Register(fs)
	var b bytes.Buffer
	Markdown(&b, fs, []Family{LibreChat})
	for _, want := range []string{
		"| --listen | string | `127.0.0.1:8080` | `--listen` `-addr` `CODELLM_LISTEN` `LIBRECHAT_CODE_LISTEN` `CODELLM_ADDR` | listen address |",
		"| --worker-token | string | — | `--worker-token` `CODELLM_HUB_WORKER_TOKEN` `LIBRECHAT_CODE_HUB_WORKER_TOKEN` `CODEAPI_BRIDGE_TOKEN` | token |",
		"| --tenant | string | — | `--tenant` | per-call argument |",
		"| CODELLM_HUB_MAX_BODY | size | `1MiB` | `CODELLM_HUB_MAX_BODY` `LIBRECHAT_CODE_HUB_MAX_BODY` | body |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}

// Every setting's default parses (a table mistake would otherwise surface only at run time).
func TestDefaultsParse(t *testing.T) {
	if _, _, err := load(nil, nil); err != nil {
		t.Fatal(err)
	}
}

// Several sets in one FlagSet load together; each Bind sees every set's values, after all are loaded.
func TestSetsBindTogether(t *testing.T) {
	var got []string
	a := &Set{Settings: []Setting{{Name: "b-first", Kind: String, Default: "1"}}}
	b := &Set{Settings: []Setting{{Name: "a-second", Kind: Int, Default: "2"}}}
	a.Bind = func(v *Values) { got = append(got, "a:"+v.String("b-first")+fmt.Sprint(v.Int("a-second"))) }
	b.Bind = func(v *Values) { got = append(got, "b:"+v.String("b-first")) }
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	a.Register(fs)
	b.Register(fs)
	if s := Sets(fs); len(s) != 2 || s[0] != a || s[1] != b {
		t.Fatalf("sets %v", s)
	}
	if err := fs.Parse([]string{"--a-second", "3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(fs, nil, func(string) (string, bool) { return "", false }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[a:13 b:1]" {
		t.Fatal(got)
	}
}

// Parse's exit codes: 0 after --help, 2 for a bad flag and for a bad value (whose message names it),
// -1 to go on.
func TestParseExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		code int
		out  string
	}{
		{nil, nil, -1, ""},
		{[]string{"--help"}, nil, 0, ""},
		{[]string{"--no-such-flag"}, nil, 2, "codellm t: unknown flag --no-such-flag\nsee 'codellm t --help'\n"},
		{[]string{"a", "--no-such=1"}, nil, 2, "codellm t: unknown flag --no-such\n"},
		{[]string{"--timeout", "soon"}, nil, 2, "codellm t: --timeout=\"soon\": want a duration such as 90s or 5m\nsee 'codellm t --help'\n"},
		{[]string{"x", "-max-stdout-bytes=64X"}, nil, 2, `codellm t: -max-stdout-bytes="64X" (--max-output-bytes): invalid size unit`},
		{[]string{"--timeout"}, nil, 2, "codellm t: --timeout needs a value\n"},
		{[]string{"file", "--addr"}, nil, 2, "codellm t: -addr needs a value\n"},
		{nil, map[string]string{"LIBRECHAT_CODE_MAX_BLOCKS": "x"}, 2, "codellm t: LIBRECHAT_CODE_MAX_BLOCKS=\"x\" (--max-blocks): want a whole number\nsee 'codellm t --help'\n"},
	} {
		var out bytes.Buffer
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(&out)
		testSet().Register(fs)
		_, code := Parse(fs, c.args, []Family{LibreChat}, func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if code != c.code || !strings.Contains(out.String(), c.out) {
			t.Errorf("%v %v: exit %d, want %d; output %q", c.args, c.env, code, c.code, out.String())
		}
		if code == 2 && strings.Count(out.String(), "\n") != 2 {
			t.Errorf("%v %v: a usage error is one line and the hint, got %q", c.args, c.env, out.String())
		}
	}
}

// Flags anywhere among the positional arguments, in both spellings, with "=" or the next argument as the
// value; "--" ends them; "-" is positional; a bool flag takes its value only after "=".
func TestParseInterspersed(t *testing.T) {
	for _, c := range []struct {
		args, pos      []string
		dash           bool
		listen, blocks string
		network        bool
	}{
		{args: []string{"role.md", "--listen", "a:1"}, pos: []string{"role.md"}, listen: "a:1"},
		{args: []string{"--listen=a:1", "role.md", "-max-blocks", "3", "x"}, pos: []string{"role.md", "x"}, listen: "a:1", blocks: "3"},
		{args: []string{"-", "--network", "y"}, pos: []string{"-", "y"}, network: true},
		{args: []string{"a", "--network=false", "--", "--listen", "b"}, pos: []string{"a", "--listen", "b"}},
		{args: []string{"-AbC_d", "--listen", "a:1", "url"}, pos: []string{"-AbC_d", "url"}, dash: true, listen: "a:1"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		testSet().Register(fs)
		none := func(string) (string, bool) { return "", false }
		parseFn := Parse
		if c.dash {
			parseFn = ParseDashPositional
		}
		v, code := parseFn(fs, c.args, nil, none)
		if code != -1 {
			t.Fatalf("%q: exit %d", c.args, code)
		}
		if fmt.Sprint(fs.Args()) != fmt.Sprint(c.pos) {
			t.Errorf("%q: positional %q, want %q", c.args, fs.Args(), c.pos)
		}
		if c.listen != "" && v.String("listen") != c.listen || c.blocks != "" && fmt.Sprint(v.Int("max-blocks")) != c.blocks ||
			v.Bool("network") != c.network {
			t.Errorf("%q: listen %q, max-blocks %d, network %v", c.args, v.String("listen"), v.Int("max-blocks"), v.Bool("network"))
		}
	}
}
