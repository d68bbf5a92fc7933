package interp

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestBuiltin(t *testing.T) {
	r := Builtin()
	want := []Interpreter{
		{Name: "python", Cmd: []string{"python3"}, Labels: []string{"py", "python", "python3"}, Ext: ".py"},
		{Name: "node", Cmd: []string{"node"}, Labels: []string{"js", "javascript", "node"}, Ext: ".js"},
		{Name: "bash", Cmd: []string{"bash"}, Labels: []string{"sh", "bash"}, Ext: ".sh"},
		{Name: "ruby", Cmd: []string{"ruby"}, Labels: []string{"rb", "ruby"}, Ext: ".rb"},
		{Name: "php", Cmd: []string{"php"}, Labels: []string{"php"}, Ext: ".php"},
		{Name: "perl", Cmd: []string{"perl"}, Labels: []string{"pl", "perl"}, Ext: ".pl"},
	}
	// LibreChat's languages follow fleet's six; the compiled ones are checked by the runner's tests.
	if got := r.Interpreters(); !reflect.DeepEqual(got[:len(want)], want) {
		t.Fatalf("builtin registry:\n got %+v\nwant %+v", got, want)
	}
	wantLabels := []string{"bash", "c", "c++", "cc", "cpp", "cxx", "d", "f90", "f95", "fortran", "go", "golang", "java", "javascript", "js",
		"node", "perl", "php", "pl", "py", "python", "python3", "r", "rb", "rs", "rscript", "ruby", "rust", "sh", "ts", "typescript"}
	if got := r.Labels(); !reflect.DeepEqual(got, wantLabels) {
		t.Fatalf("labels %q", got)
	}
	if got := r.Names(); !reflect.DeepEqual(got, []string{"bash", "c", "cpp", "d", "fortran", "go", "java", "node", "perl", "php", "python", "r", "ruby", "rust", "typescript"}) {
		t.Fatalf("names %q", got)
	}
	for label, name := range map[string]string{"py": "python", "PY": "python", "Python3": "python", "JavaScript": "node", "sh": "bash", "pl": "perl"} {
		in, ok := r.Lookup(label)
		if !ok || in.Name != name {
			t.Fatalf("Lookup(%q) = %+v, %v; want %s", label, in, ok, name)
		}
	}
	for _, label := range []string{"", "kotlin", "python ", "sh\u00a0"} {
		if in, ok := r.Lookup(label); ok {
			t.Fatalf("Lookup(%q) = %+v", label, in)
		}
	}
	if Builtin() != r {
		t.Fatal("Builtin is not loaded once")
	}
}

// TestRegistryImmutable: what accessors return cannot change the registry.
func TestRegistryImmutable(t *testing.T) {
	r, err := Load(strings.NewReader(`{"interpreters":[{"name":"py","cmd":["python3","-u"],"code_block_labels":["py"],"ext":".py","env":[{"name":"A","value":"1"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	list := r.Interpreters()
	list[0].Cmd[0], list[0].Labels[0], list[0].Env[0].Value = "x", "x", "x"
	in, _ := r.Lookup("py")
	in.Cmd[1] = "y"
	r.Labels()[0] = "z"
	again, ok := r.Lookup("py")
	if !ok || !reflect.DeepEqual(*again, Interpreter{Name: "py", Cmd: []string{"python3", "-u"}, Labels: []string{"py"}, Ext: ".py", Env: []EnvVar{{Name: "A", Value: "1"}}}) {
		t.Fatalf("registry changed: %+v", again)
	}
	if r.Labels()[0] != "py" {
		t.Fatal("labels changed")
	}
}

func TestLoadValid(t *testing.T) {
	r, err := Load(strings.NewReader(`{"interpreters":[{"name":"python","cmd":["python3"],"code_block_labels":["py","python","python3"],
		"ext":".py","env":[{"name":"PYTHONUNBUFFERED","value":"1"}]},
		{"name":"my-sh_2","cmd":["/bin/sh","-e"],"code_block_labels":["sh2"],"ext":".SH2"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	in, ok := r.Lookup("sh2")
	if !ok || in.Name != "my-sh_2" || !reflect.DeepEqual(in.Cmd, []string{"/bin/sh", "-e"}) || in.Ext != ".SH2" {
		t.Fatalf("%+v", in)
	}
	py, _ := r.ByName("python")
	if !reflect.DeepEqual(py.Env, []EnvVar{{Name: "PYTHONUNBUFFERED", Value: "1"}}) {
		t.Fatalf("%+v", py)
	}
}

// entry wraps one interpreter object after a valid first entry, so errors must name interpreters[1].
func entry(obj string) string {
	return `{"interpreters":[{"name":"bash","cmd":["bash"],"code_block_labels":["sh","bash"],"ext":".sh"},` + obj + `]}`
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name, json, want string
	}{
		{"not json", `{`, `unexpected EOF`},
		{"trailing data", `{"interpreters":[{"name":"a","cmd":["a"],"code_block_labels":["a"],"ext":".a"}]} {}`, `trailing data after the JSON value`},
		{"top-level unknown field", `{"interpreters":[],"extra":1}`, `unknown field "extra"`},
		{"missing list", `{}`, `missing "interpreters" list`},
		{"null list", `{"interpreters":null}`, `missing "interpreters" list`},
		{"empty list", `{"interpreters":[]}`, `"interpreters" is empty`},
		{"bad entry in a list later repeated", `{"interpreters":[{"name":"a"},{"name":"b","Cmd":[]}],"interpreters":null}`,
			`interpreters[1]: unknown field "Cmd"`},
		{"top-level duplicate key", `{"interpreters":[],"interpreters":[]}`, `duplicate key "interpreters" in $`},
		{"entry not an object", entry(`"ruby"`), `interpreters[1]: entry is not an object`},
		{"entry null", entry(`null`), `interpreters[1]: entry is not an object`},
		{"unknown field", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","labels":["x"]}`),
			`interpreters[1] ("ruby"): unknown field "labels"`},
		{"duplicate key in entry", entry(`{"name":"ruby","cmd":["ruby"],"cmd":["x"],"code_block_labels":["rb"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): duplicate key "cmd"`},
		{"mis-cased key in entry", entry(`{"name":"ruby","Cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): unknown field "Cmd"`},
		{"mis-cased repeat in entry", entry(`{"name":"ruby","cmd":["ruby"],"CMD":["x"],"code_block_labels":["rb"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): unknown field "CMD"`},
		{"mis-cased key in env", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"Name":"A","value":"1"}]}`),
			`interpreters[1] ("ruby"): unknown field "Name" in $.interpreters[1].env[0]`},
		{"mis-cased top-level key", `{"Interpreters":[{"name":"a","cmd":["a"],"code_block_labels":["a"],"ext":".a"}]}`,
			`unknown field "Interpreters" in $`},
		{"duplicate key in env", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"name":"A","value":"1","value":"2"}]}`),
			`interpreters[1] ("ruby"): duplicate key "value" in $.interpreters[1].env[0]`},
		{"wrong type", entry(`{"name":"ruby","cmd":"ruby","code_block_labels":["rb"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): cannot unmarshal`},
		{"missing name", entry(`{"cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb"}`), `interpreters[1]: missing "name"`},
		{"bad name", entry(`{"name":"Ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb"}`),
			`interpreters[1] ("Ruby"): name "Ruby" must match [a-z0-9_-]+`},
		{"name with space", entry(`{"name":"ru by","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb"}`),
			`interpreters[1] ("ru by"): name "ru by" must match`},
		{"duplicate name", entry(`{"name":"bash","cmd":["bash"],"code_block_labels":["b"],"ext":".sh"}`),
			`interpreters[1] ("bash"): name "bash" is already used by interpreters[0] ("bash")`},
		{"missing cmd", entry(`{"name":"ruby","code_block_labels":["rb"],"ext":".rb"}`), `interpreters[1] ("ruby"): "cmd" is empty`},
		{"empty cmd", entry(`{"name":"ruby","cmd":[],"code_block_labels":["rb"],"ext":".rb"}`), `interpreters[1] ("ruby"): "cmd" is empty`},
		{"empty cmd0", entry(`{"name":"ruby","cmd":[""],"code_block_labels":["rb"],"ext":".rb"}`), `interpreters[1] ("ruby"): cmd[0] is empty`},
		{"relative cmd0", entry(`{"name":"ruby","cmd":["bin/ruby"],"code_block_labels":["rb"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): cmd[0] "bin/ruby" must be an absolute path or a program name looked up in PATH`},
		{"NUL in cmd", entry(`{"name":"ruby","cmd":["ruby","-e\u0000"],"code_block_labels":["rb"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): cmd[1] contains a NUL byte`},
		{"missing labels", entry(`{"name":"ruby","cmd":["ruby"],"ext":".rb"}`), `interpreters[1] ("ruby"): "code_block_labels" is empty`},
		{"empty label", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":[""],"ext":".rb"}`), `interpreters[1] ("ruby"): empty label`},
		{"upper-case label", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb","Ruby"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): label "Ruby" is not lower-case`},
		{"label with space", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["r b"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): label "r b" contains whitespace or a control character`},
		{"duplicate label across entries", entry(`{"name":"zsh","cmd":["zsh"],"code_block_labels":["zsh","sh"],"ext":".zsh"}`),
			`interpreters[1] ("zsh"): label "sh" is already used by interpreters[0] ("bash")`},
		{"duplicate label in entry", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb","rb"],"ext":".rb"}`),
			`interpreters[1] ("ruby"): label "rb" is listed twice`},
		{"missing ext", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"]}`),
			`interpreters[1] ("ruby"): ext "" must be "." followed by [A-Za-z0-9]+`},
		{"ext without dot", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":"rb"}`), `ext "rb" must be`},
		{"ext with path", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":"./rb"}`), `ext "./rb" must be`},
		{"ext dot only", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":"."}`), `ext "." must be`},
		{"ext two dots", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".tar.gz"}`), `ext ".tar.gz" must be`},
	}
	for _, name := range Reserved {
		cases = append(cases, struct{ name, json, want string }{"reserved env " + name,
			entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"name":"` + name + `","value":"x"}]}`),
			`interpreters[1] ("ruby"): env name ` + name + ` is reserved (set by codellm for every block)`})
	}
	cases = append(cases, []struct{ name, json, want string }{
		{"bad env name", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"name":"A=B","value":"x"}]}`),
			`interpreters[1] ("ruby"): env name "A=B" must match`},
		{"empty env name", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"value":"x"}]}`),
			`interpreters[1] ("ruby"): env name "" must match`},
		{"repeated env name", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"name":"A","value":"x"},{"name":"A","value":"y"}]}`),
			`interpreters[1] ("ruby"): env name A is listed twice`},
		{"NUL in env value", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"name":"A","value":"\u0000"}]}`),
			`interpreters[1] ("ruby"): env A value contains a NUL byte`},
		{"unknown env field", entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"name":"A","val":"x"}]}`),
			`interpreters[1] ("ruby"): unknown field "val"`},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Load(strings.NewReader(c.json))
			if r != nil || err == nil {
				t.Fatalf("accepted: %v", err)
			}
			if !errors.Is(err, ErrInvalidRegistry) {
				t.Fatalf("error %v does not match ErrInvalidRegistry", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want it to contain %q", err, c.want)
			}
			if strings.HasPrefix(c.want, "interpreters[") && !strings.HasPrefix(err.Error(), c.want[:len("interpreters[1]")]) {
				t.Fatalf("error %q does not start by naming the entry", err)
			}
		})
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"interpreters":[{"name":"sh","cmd":["/bin/sh"],"code_block_labels":["sh"],"ext":".sh"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := LoadFile(good)
	if err != nil || !reflect.DeepEqual(r.Labels(), []string{"sh"}) {
		t.Fatalf("%v %v", r, err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(entry(`{"name":"zsh","cmd":["zsh"],"code_block_labels":["bash"],"ext":".zsh"}`)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFile(bad)
	if want := bad + `: interpreters[1] ("zsh"): label "bash" is already used by interpreters[0] ("bash")`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
	_, err = LoadFile(filepath.Join(dir, "missing.json"))
	if !errors.Is(err, ErrInvalidRegistry) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	huge := filepath.Join(dir, "huge.json")
	if err := os.WriteFile(huge, []byte(`{"interpreters":[`+strings.Repeat(" ", maxRegistryBytes)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(huge); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("huge file: %v", err)
	}
}
