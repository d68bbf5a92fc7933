package layering

import (
	"go/parser"
	"go/token"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

const mod = "github.com/codellm/codellm/"

// rules: each package must not depend (directly or not) on any of the listed ones.
var rules = []struct {
	pkg       string
	forbidden []string
	why       string
}{
	{"internal/worker", []string{"internal/server", "internal/debugger"},
		"the worker calls the execution core (runner, workspace) directly, never the HTTP server"},
	{"internal/chat", []string{"internal/server", "internal/worker", "internal/debugger", "internal/runner", "internal/workspace", "internal/hub"},
		"the chat core is below every transport: the server and the worker's chat operation both call it"},
	{"internal/engine", []string{"internal/server", "internal/chat", "internal/worker"},
		"the engine is below the chat core and the surfaces"},
	{"internal/debugger", []string{"internal/server"},
		"the debugger maps errors through internal/apierror, like the server, instead of importing it"},
	{"internal/execution", []string{"internal/pipeline", "internal/runner", "internal/workspace", "internal/engine", "internal/server"},
		"the capture/limit/kill core sits under every surface"},
	{"internal/pipeline", []string{"internal/engine", "internal/server", "internal/runner", "internal/workspace"},
		"the pipeline is a layer below the engine and the surfaces"},
	{"internal/runner", []string{"internal/server", "internal/engine", "internal/pipeline"},
		"the runner API is one surface over the core, not over the chat surface"},
	{"internal/workspace", []string{"internal/server", "internal/engine", "internal/runner"},
		"workspace tools are one surface over the core"},
	{"internal/sandbox", []string{"internal/execution", "internal/pipeline", "internal/runner", "internal/server"},
		"the sandbox knows nothing of its users"},
}

func deps(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "./"+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps ./%s: %v", pkg, err)
	}
	m := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		m[l] = true
	}
	return m
}

func TestDependencyRules(t *testing.T) {
	for _, r := range rules {
		d := deps(t, "../../"+r.pkg)
		for _, f := range r.forbidden {
			if d[mod+f] {
				t.Errorf("%s depends on %s: %s", r.pkg, f, r.why)
			}
		}
	}
}

// The sandbox helper's body runs in package initialisation before the rest of the binary, so it may
// import nothing outside the standard library (see package hook's documentation).
func TestHookImportsOnlyTheStandardLibrary(t *testing.T) {
	for p := range deps(t, "../../internal/sandbox/hook") {
		if strings.Contains(strings.Split(p, "/")[0], ".") && p != mod+"internal/sandbox/hook" {
			t.Errorf("package hook depends on %s", p)
		}
	}
}

// The spawner's loop also runs in package initialisation, and every page its heap holds is copied by each
// of its forks: it may import the standard library, golang.org/x/sys/unix and the raw helper's packages
// (hook's spec, the compiler, rawchild), which hold to the same rule.
func TestSpawnerImportsOnlyTheStandardLibrary(t *testing.T) {
	raw := map[string]bool{mod + "internal/sandbox/spawner": true, mod + "internal/sandbox/hook": true,
		mod + "internal/sandbox/rawchild": true, mod + "internal/sandbox/rawhelper": true}
	for p := range deps(t, "../../internal/sandbox/spawner") {
		if strings.Contains(strings.Split(p, "/")[0], ".") && !raw[p] && !strings.HasPrefix(p, "golang.org/x/sys/") {
			t.Errorf("package spawner depends on %s", p)
		}
	}
}

// rawchild's child runs in a fork of the spawner (or of any caller) without the runtime: it may import
// the standard library and golang.org/x/sys/unix only, like the spawner it is meant for.
func TestRawchildImportsOnlyTheStandardLibrary(t *testing.T) {
	for p := range deps(t, "../../internal/sandbox/rawchild") {
		if strings.Contains(strings.Split(p, "/")[0], ".") && p != mod+"internal/sandbox/rawchild" &&
			!strings.HasPrefix(p, "golang.org/x/sys/") {
			t.Errorf("package rawchild depends on %s", p)
		}
	}
}

// cmd/codellm is one package (serve builds the server), so go list cannot tell its subcommands apart; the
// worker subcommand's file is checked by its imports instead: its chat operation calls internal/chat
// directly and never builds an HTTP server in-process.
func TestWorkerCommandDoesNotBuildAServer(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../cmd/codellm/worker.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	chat := false
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if p == mod+"internal/server" {
			t.Errorf("cmd/codellm/worker.go imports internal/server: the worker calls the chat core (internal/chat) directly")
		}
		chat = chat || p == mod+"internal/chat"
	}
	if !chat {
		t.Errorf("cmd/codellm/worker.go does not import internal/chat: where does the worker's chat operation go?")
	}
}
