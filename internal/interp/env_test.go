package interp

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// childEnv runs the real env(1) with exactly env and returns what the process saw.
func childEnv(t *testing.T, env []string) []string {
	t.Helper()
	envPath, err := LookPath("env")
	if err != nil {
		t.Skipf("env(1) not in %s: %v", ChildPATH, err)
	}
	cmd := exec.Command(envPath, "-0")
	cmd.Env = env
	cmd.Dir = "/"
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	slices.Sort(got)
	return got
}

func TestEnvExactSet(t *testing.T) {
	t.Setenv("CODELLM_API_KEY", "server-secret") // in codellm's own environment; must not be inherited
	dir := t.TempDir()
	in := Interpreter{Name: "python", Cmd: []string{"python3"}, Labels: []string{"py"}, Ext: ".py",
		Env: []EnvVar{{Name: "PYTHONUNBUFFERED", Value: "1"}, {Name: "MULTI", Value: "a\nb=c"}}}
	env := Env(dir, in, []string{"OPERATOR_TOKEN=t0k"})
	want := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + dir,
		"TMPDIR=" + filepath.Join(dir, "tmp"),
		"LANG=C.UTF-8",
		"FLEET_INPUT=" + filepath.Join(dir, "input.json"),
		"CODELLM_INPUT=" + filepath.Join(dir, "input.json"),
		"PYTHONUNBUFFERED=1",
		"MULTI=a\nb=c",
		"OPERATOR_TOKEN=t0k",
	}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("Env:\n got %q\nwant %q", env, want)
	}
	slices.Sort(want)
	if got := childEnv(t, env); !reflect.DeepEqual(got, want) {
		t.Fatalf("child saw:\n got %q\nwant %q", got, want)
	}
	// The builtin interpreters have no env: exactly the six fixed variables.
	bash, _ := Builtin().Lookup("sh")
	if got := Env(dir, *bash, nil); len(got) != 6 {
		t.Fatalf("builtin env %q", got)
	}
}

func TestExposed(t *testing.T) {
	environ := []string{
		"HOME=/root", "PATH=/usr/bin", "LANG=en_US.UTF-8",
		"CODELLM_API_KEY=server-secret", "CODELLM_LISTEN=0.0.0.0:1", "CODELLM_INPUT=/x",
		"GIT_TOKEN=g1", "GIT_AUTHOR=me", "GITHUB_TOKEN=gh", "EMPTY=", "DUP=first", "DUP=second",
		"NOEQUALS", "=weird", "OTHER=o",
	}
	cases := []struct {
		name     string
		names    []string
		prefixes []string
		want     []string
	}{
		{"nothing", nil, nil, []string{}},
		{"names comma-separated and repeated", []string{"OTHER,GIT_TOKEN", " EMPTY ", "OTHER"}, nil,
			[]string{"EMPTY=", "GIT_TOKEN=g1", "OTHER=o"}},
		{"absent name stays unset", []string{"NOT_SET", "OTHER"}, nil, []string{"OTHER=o"}},
		{"first occurrence wins", []string{"DUP"}, nil, []string{"DUP=first"}},
		{"prefix", nil, []string{"GIT_"}, []string{"GIT_AUTHOR=me", "GIT_TOKEN=g1"}},
		{"prefixes repeated and overlapping names", []string{"GIT_TOKEN"}, []string{"GIT", "GIT_"},
			[]string{"GITHUB_TOKEN=gh", "GIT_AUTHOR=me", "GIT_TOKEN=g1"}},
		{"prefix CODELLM_ exposes none of codellm's configuration", nil, []string{"CODELLM_"}, []string{}},
		{"prefix CODELLM exposes none of codellm's configuration", nil, []string{"CODELLM"}, []string{}},
		{"prefix C skips codellm's configuration", nil, []string{"C"}, []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Exposed(environ, c.names, c.prefixes, Builtin())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %q want %q", got, c.want)
			}
		})
	}
}

func TestExposedErrors(t *testing.T) {
	withEnv, err := Load(strings.NewReader(`{"interpreters":[{"name":"python","cmd":["python3"],"code_block_labels":["py"],"ext":".py","env":[{"name":"PYTHONUNBUFFERED","value":"1"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	environ := []string{"PATH=/usr/bin", "PYTHONUNBUFFERED=0", "PYTHONPATH=/x", "CODELLM_API_KEY=server-secret", "LANG=C"}
	cases := []struct {
		names, prefixes []string
		want            string
	}{
		{[]string{"CODELLM_API_KEY"}, nil, "invalid environment exposure: --expose-env CODELLM_API_KEY: codellm's own configuration (CODELLM_*) is never exposed"},
		{nil, []string{""}, "invalid environment exposure: --expose-env-prefix is empty (it would expose the whole environment)"},
		{nil, []string{"GIT_", ""}, "--expose-env-prefix is empty"},
		{[]string{"PYTHONUNBUFFERED"}, nil, `invalid environment exposure: --expose-env PYTHONUNBUFFERED is also set by interpreter "python"`},
		{nil, []string{"PYTHON"}, `invalid environment exposure: --expose-env-prefix "PYTHON" matches PYTHONUNBUFFERED is also set by interpreter "python"`},
		{nil, []string{"PA"}, `invalid environment exposure: --expose-env-prefix "PA" matches PATH is reserved (set by codellm for every block)`},
		{[]string{"A,"}, nil, `invalid environment exposure: --expose-env "": not a variable name`},
		{[]string{"A-B"}, nil, `--expose-env "A-B": not a variable name`},
		{[]string{"1A"}, nil, `--expose-env "1A": not a variable name`},
	}
	for _, name := range Reserved {
		want := "invalid environment exposure: --expose-env " + name + " is reserved (set by codellm for every block)"
		if name == "CODELLM_INPUT" {
			want = "--expose-env CODELLM_INPUT: codellm's own configuration"
		}
		cases = append(cases, struct {
			names, prefixes []string
			want            string
		}{[]string{name}, nil, want})
	}
	for _, c := range cases {
		got, err := Exposed(environ, c.names, c.prefixes, withEnv)
		if got != nil || err == nil || !errors.Is(err, ErrInvalidExposure) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Exposed(%q, %q) = %q, %v; want error containing %q", c.names, c.prefixes, got, err, c.want)
		}
	}
	// Reserved and interpreter names only conflict when actually exposed: the same prefix is fine when
	// nothing reserved matches it, and a registry without that env entry has no conflict.
	if got, err := Exposed([]string{"PAGER=less"}, nil, []string{"PA"}, withEnv); err != nil || !reflect.DeepEqual(got, []string{"PAGER=less"}) {
		t.Fatalf("%q %v", got, err)
	}
	if got, err := Exposed(environ, []string{"PYTHONUNBUFFERED"}, nil, Builtin()); err != nil || !reflect.DeepEqual(got, []string{"PYTHONUNBUFFERED=0"}) {
		t.Fatalf("%q %v", got, err)
	}
}

// TestAPIKeyNeverReachesChild is differential: the secret is in codellm's environment (a plain inherited
// environment shows it), yet no exposure that is accepted puts it into a block's environment.
func TestAPIKeyNeverReachesChild(t *testing.T) {
	const secret = "sk-codellm-test-secret-91c2"
	t.Setenv("CODELLM_API_KEY", secret)
	envPath, err := LookPath("env")
	if err != nil {
		t.Skip(err)
	}
	inherited, err := exec.Command(envPath).Output()
	if err != nil || !bytes.Contains(inherited, []byte(secret)) {
		t.Fatalf("control: inherited environment lacks the secret (%v)", err)
	}
	environ := []string{"CODELLM_API_KEY=" + secret, "CODELLM_TLS_KEY=/k", "OTHER=1"}
	for _, prefixes := range [][]string{{"CODELLM_"}, {"CODELLM"}, {"C"}, {"CODELLM_API"}, {""}} {
		exposed, err := Exposed(environ, nil, prefixes, Builtin())
		if err != nil {
			if prefixes[0] != "" {
				t.Fatalf("prefix %q: %v", prefixes, err)
			}
			continue // the empty prefix is refused outright
		}
		for _, kv := range childEnv(t, Env(t.TempDir(), Interpreter{}, exposed)) {
			if strings.Contains(kv, secret) || strings.HasPrefix(kv, "CODELLM_API_KEY=") {
				t.Fatalf("prefix %q exposed %q", prefixes, kv)
			}
		}
	}
	if _, err := Exposed(environ, []string{"OTHER,CODELLM_API_KEY"}, nil, Builtin()); err == nil {
		t.Fatal("explicit CODELLM_API_KEY accepted")
	}
}
