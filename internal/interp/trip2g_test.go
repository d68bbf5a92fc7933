package interp

import (
	"reflect"
	"strings"
	"testing"
)

// trip2gRegistry is interpreters.json in trip2g's shape: a top-level env for every interpreter and env
// entries guarded by if_exists (trip2g's image sets NODE_PATH only where its bundle is installed).
func trip2gRegistry(present string) string {
	return `{"env": [{"name": "SSL_CERT_FILE", "value": "/usr/lib/ssl-certs/ca-bundle.crt", "if_exists": "/nonexistent/ca-bundle.crt"},
         {"name": "SHARED", "value": "global", "if_exists": "` + present + `"}],
 "interpreters": [
  {"name": "python", "cmd": ["python3"], "code_block_labels": ["py", "python", "python3"], "ext": ".py",
   "env": [{"name": "PYTHONTZPATH", "value": ""}, {"name": "SHARED", "value": "python's own"}]},
  {"name": "node", "cmd": ["node"], "code_block_labels": ["js", "javascript", "node"], "ext": ".js",
   "env": [{"name": "NODE_PATH", "value": "/usr/lib/node_modules", "if_exists": "/nonexistent/node_modules"}]},
  {"name": "bash", "cmd": ["bash"], "code_block_labels": ["sh", "bash"], "ext": ".sh"}
]}`
}

func TestTrip2gRegistryShapeLoads(t *testing.T) {
	r, err := Load(strings.NewReader(trip2gRegistry(t.TempDir())))
	if err != nil {
		t.Fatalf("trip2g's interpreters.json is refused: %v", err)
	}
	want := map[string][]EnvVar{
		// The entry's own SHARED wins over the top-level one; an empty value is kept.
		"python": {{Name: "PYTHONTZPATH"}, {Name: "SHARED", Value: "python's own"}},
		// NODE_PATH's if_exists path is absent: dropped. The top-level SHARED applies (its path exists).
		"node": {{Name: "SHARED", Value: "global"}},
		"bash": {{Name: "SHARED", Value: "global"}},
	}
	for name, env := range want {
		in, _ := r.ByName(name)
		if !reflect.DeepEqual(in.Env, env) {
			t.Errorf("%s env = %+v, want %+v", name, in.Env, env)
		}
	}
}

func TestTrip2gRegistryShapeIsStillStrict(t *testing.T) {
	for _, bad := range []string{
		`{"env": [{"name": "PATH", "value": "/x"}], "interpreters": [{"name": "bash", "cmd": ["bash"], "code_block_labels": ["sh"], "ext": ".sh"}]}`,
		`{"env": [{"name": "A", "value": "1", "if_exist": "/x"}], "interpreters": [{"name": "bash", "cmd": ["bash"], "code_block_labels": ["sh"], "ext": ".sh"}]}`,
		`{"env": [{"name": "A", "value": "1", "if_exists": "relative"}], "interpreters": [{"name": "bash", "cmd": ["bash"], "code_block_labels": ["sh"], "ext": ".sh"}]}`,
		`{"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "interpreters": [{"name": "bash", "cmd": ["bash"], "code_block_labels": ["sh"], "ext": ".sh"}]}`,
		`{"envs": [], "interpreters": [{"name": "bash", "cmd": ["bash"], "code_block_labels": ["sh"], "ext": ".sh"}]}`,
	} {
		if _, err := Load(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestWithPathEnv(t *testing.T) {
	r, _ := Load(strings.NewReader(trip2gRegistry("/")))
	got := r.WithPathEnv("python", "PYTHONPATH", "/codellm/python").WithPathEnv("python", "SHARED", "/more")
	in, _ := got.ByName("python")
	if !reflect.DeepEqual(in.Env, []EnvVar{{Name: "PYTHONTZPATH"}, {Name: "SHARED", Value: "python's own:/more"},
		{Name: "PYTHONPATH", Value: "/codellm/python"}}) {
		t.Errorf("env = %+v", in.Env)
	}
	if orig, _ := r.ByName("python"); len(orig.Env) != 2 {
		t.Errorf("WithPathEnv changed the original registry: %+v", orig.Env)
	}
}
