package packages

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/interp"
)

func need(t *testing.T, tools ...string) {
	for _, tool := range tools {
		if _, err := interp.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (apt-get install python3-pip npm)", tool)
		}
	}
	if tools[0] == "python3" && exec.Command("python3", "-m", "pip", "--version").Run() != nil {
		t.Skip("pip is not installed for python3 (apt-get install python3-pip)")
	}
}

// A python set from a local wheel and a node set from a local folder, without a package index: their
// manifests, the modules where the module path will point, read-only files; a failed add leaves the set
// it would have replaced, and nothing half-built.
func TestAddListRemove(t *testing.T) {
	need(t, "python3", "node", "npm")
	dir := t.TempDir()
	var log bytes.Buffer
	py, err := Add(dir, "greet", Python, []string{"--no-index", "--find-links", "../../examples/packages/wheels", "greet"}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if py.LanguageVersion == "" || len(py.Packages) != 1 || py.Packages[0] != (Package{"greet", "1.0"}) {
		t.Fatalf("python set %+v", py)
	}
	js, err := Add(dir, "greet-js", Node, []string{"--install-links", "../../examples/packages/greet-js"}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(js.Packages) != 1 || js.Packages[0] != (Package{"greet-js", "1.0.0"}) {
		t.Fatalf("node set %+v", js)
	}
	mod := filepath.Join(dir, "packages", "greet", "site-packages", "greet", "__init__.py")
	if fi, err := os.Stat(mod); err != nil || fi.Mode().Perm() != 0o444 {
		t.Fatalf("%s: %v %v (want 0444)", mod, fi.Mode(), err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "packages", "greet-js", "node_modules", "greet-js")); err != nil || !fi.IsDir() {
		t.Fatalf("node_modules/greet-js is not a directory of its own (a link would leave the set): %v %v", fi, err)
	}
	sets, err := List(dir)
	if err != nil || len(sets) != 2 || sets[0].Name != "greet" || sets[1].Name != "greet-js" {
		t.Fatalf("List = %+v, %v", sets, err)
	}
	if _, err := Add(dir, "greet", Python, []string{"--no-index", "--find-links", "../../examples/packages/wheels", "no-such-dist"}, &log); err == nil {
		t.Fatal("installing a missing distribution succeeded")
	}
	if s, err := read(filepath.Join(dir, "packages", "greet")); err != nil || len(s.Packages) != 1 {
		t.Fatalf("the failed add replaced the set: %+v %v", s, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "packages", ".*")); len(left) != 0 {
		t.Fatalf("half-built sets left: %v", left)
	}
	if err := Remove(dir, "greet"); err != nil {
		t.Fatal(err)
	}
	if sets, _ := List(dir); len(sets) != 1 {
		t.Fatalf("after remove: %+v", sets)
	}
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, lang, want string }{
		{"Bad/Name", Python, "set name"}, {"ok", "ruby", `language "ruby"`},
	} {
		if _, err := Add(dir, c.name, c.lang, []string{"x"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Add(%q, %q): %v, want %q", c.name, c.lang, err, c.want)
		}
	}
	os.MkdirAll(filepath.Join(dir, "packages", "stray"), 0o755)
	if _, err := List(dir); err == nil || !strings.Contains(err.Error(), "codellm packages add") {
		t.Errorf("a directory without a manifest: %v", err)
	}
}

// Install puts each set after what the registry already has, the block's path first.
func TestInstall(t *testing.T) {
	reg := Install(interp.Builtin(), "/srv/pk", []Set{{Name: "a", Language: Python}, {Name: "b", Language: Node}})
	py, _ := reg.ByName("python")
	node, _ := reg.ByName("node")
	env := func(in *interp.Interpreter, k string) string {
		for _, e := range in.Env {
			if e.Name == k {
				return e.Value
			}
		}
		return ""
	}
	if got := env(py, "PYTHONPATH"); got != "/codellm/packages/a/site-packages:/srv/pk/packages/a/site-packages" {
		t.Errorf("PYTHONPATH %q", got)
	}
	if got := env(node, "NODE_PATH"); got != "/codellm/packages/b/node_modules:/srv/pk/packages/b/node_modules" {
		t.Errorf("NODE_PATH %q", got)
	}
}
