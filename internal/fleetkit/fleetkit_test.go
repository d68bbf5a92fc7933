package fleetkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/interp"
)

// The surface role notes import, in both languages (trip2g's TestFleetkit_TwinsAreSymmetric).
func TestTwinsExportTheWholeAPI(t *testing.T) {
	tree := files()
	py, js := string(tree["python/fleetkit.py"]), string(tree["node/fleetkit/index.js"])
	exports := js[strings.Index(js, "module.exports"):]
	for _, fn := range API {
		if !strings.Contains(py, "def "+fn+"(") || !strings.Contains(py, `"`+fn+`"`) {
			t.Errorf("python fleetkit does not export %s", fn)
		}
		if !strings.Contains(js, "function "+fn+"(") || !strings.Contains(exports, fn) {
			t.Errorf("node fleetkit does not export %s", fn)
		}
	}
}

func TestMaterialiseIsReadOnlyAndReused(t *testing.T) {
	parent := t.TempDir()
	t.Cleanup(func() { makeWritable(parent) })
	dir, err := Materialise(parent)
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range files() {
		p := filepath.Join(dir, rel)
		got, err := os.ReadFile(p)
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s: %v", rel, err)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o444 {
			t.Errorf("%s mode %v, want 0444", rel, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o555 {
		t.Errorf("dir mode %v, want 0555", fi.Mode().Perm())
	}
	again, err := Materialise(parent)
	if err != nil || again != dir {
		t.Fatalf("second Materialise = %q, %v; want the same %q", again, err, dir)
	}
}

// Differential: a directory of the right name that is not exactly ours (writable, or altered) is never
// used; a fresh private one is made instead.
func TestMaterialiseDistrustsAForeignDirectory(t *testing.T) {
	parent := t.TempDir()
	t.Cleanup(func() { makeWritable(parent) })
	dir, err := Materialise(parent)
	if err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(dir, "python", "fleetkit.py")
	os.Chmod(filepath.Join(dir, "python"), 0o755)
	os.Chmod(py, 0o644)
	os.WriteFile(py, []byte("import os; os.system('evil')\n"), 0o644)
	os.Chmod(py, 0o444)
	os.Chmod(filepath.Join(dir, "python"), 0o555)
	fresh, err := Materialise(parent)
	if err != nil || fresh == dir {
		t.Fatalf("Materialise reused a tampered directory: %q %v", fresh, err)
	}
	if b, _ := os.ReadFile(filepath.Join(fresh, "python", "fleetkit.py")); !strings.Contains(string(b), "def emit(") {
		t.Fatal("the fresh directory does not hold fleetkit")
	}
}

func TestInstallPutsTheKitOnTheModulePath(t *testing.T) {
	reg := Install(interp.Builtin(), "/host/kit")
	py, _ := reg.ByName("python")
	node, _ := reg.ByName("node")
	bash, _ := reg.ByName("bash")
	if len(py.Env) != 1 || py.Env[0] != (interp.EnvVar{Name: "PYTHONPATH", Value: "/codellm/python:/host/kit/python"}) {
		t.Errorf("python env %+v", py.Env)
	}
	if len(node.Env) != 1 || !strings.HasPrefix(node.Env[0].Value, "/codellm/node:/host/kit/node:") || node.Env[0].Name != "NODE_PATH" {
		t.Errorf("node env %+v", node.Env)
	}
	if len(bash.Env) != 0 {
		t.Errorf("bash env %+v", bash.Env)
	}
}

func makeWritable(root string) {
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}
