package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// httpMachinery are the places allowed to build an http.Server, a ServeMux or to shut a server down:
// the one scaffolding (internal/httpserve), the listener limits it applies, and a test helper.
var httpMachinery = map[string]string{
	"internal/httpserve/":           "the one router and shutdown sequence",
	"internal/httpguard/limits.go":  "builds the http.Server with the listener timeouts",
	"internal/testhelp/testhelp.go": "a test origin server (imported only by tests)",
	"internal/runner/http.go":       "Runner.Handler: the runner API on its own mux for tests, without auth",
}

// Every HTTP surface routes and shuts down through internal/httpserve: a second router or drain sequence
// written beside it fails here (issue 15 item 4).
func TestOneHTTPScaffolding(t *testing.T) {
	walkGoFiles(t, "../..", allowedMachinery, func(rel string, _ *token.FileSet, f *ast.File) {
		for _, what := range httpMachineryUses(f) {
			t.Errorf("%s: %s outside internal/httpserve: route and serve through httpserve.Router and httpserve.Serve", rel, what)
		}
	})
}

func allowedMachinery(rel string) bool {
	for p := range httpMachinery {
		if rel == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p)) {
			return true
		}
	}
	return false
}

// httpMachineryUses lists a file's http.Server literals, http.NewServeMux calls and Shutdown calls.
func httpMachineryUses(f *ast.File) []string {
	var out []string
	httpSel := func(e ast.Expr, name string) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok || s.Sel.Name != name {
			return false
		}
		id, ok := s.X.(*ast.Ident)
		return ok && id.Name == "http"
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CompositeLit:
			if httpSel(x.Type, "Server") {
				out = append(out, "an http.Server literal")
			}
		case *ast.CallExpr:
			if httpSel(x.Fun, "NewServeMux") {
				out = append(out, "http.NewServeMux")
			}
			if s, ok := x.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Shutdown" {
				out = append(out, "a Shutdown call")
			}
		}
		return true
	})
	return out
}

// The detector itself finds each construct.
func TestHTTPMachineryDetector(t *testing.T) {
	src := `package p
import "net/http"
func f(ctx any) {
	hs := &http.Server{}
	_ = http.NewServeMux()
	hs.Shutdown(nil)
	_ = http.Client{}
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := httpMachineryUses(f)
	if len(got) != 3 {
		t.Fatalf("found %q, want the server literal, the mux and the Shutdown call", got)
	}
}
