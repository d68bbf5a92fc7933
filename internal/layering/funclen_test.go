package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function outside tests may be, counted from its func line to its closing
// brace: a longer one almost always mixes a policy with its plumbing and should be split where they meet.
const maxFuncLines = 80

// longFuncAllowed are functions allowed over maxFuncLines while someone is splitting them
// ("path/from/repo/root.go:Func" or "…:Recv.Func", mapped to who), so that the rule can land before the
// splits. It is empty: every function outside tests is within the limit, and a new long one fails.
var longFuncAllowed = map[string]string{}

// funcLengths returns the length in lines of every function with a body in the module's non-test,
// non-generated Go files, keyed as longFuncAllowed is.
func funcLengths(t *testing.T, root string) map[string]int {
	t.Helper()
	out := map[string]int{}
	walkGoFiles(t, root, nil, func(rel string, fset *token.FileSet, f *ast.File) {
		if ast.IsGenerated(f) {
			return
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			out[rel+":"+funcName(fd)] = n
		}
	})
	return out
}

// walkGoFiles parses every non-test Go file under root (skipping .git, node_modules, testdata and vendor
// directories, and the files skip reports true for) and calls visit with its slash-separated path relative
// to root. A walk or parse error fails the test.
func walkGoFiles(t *testing.T, root string, skip func(rel string) bool, visit func(rel string, fset *token.FileSet, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || (skip != nil && skip(rel)) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		visit(rel, fset, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// funcName is Func, or Recv.Func for a method (pointer or not, type parameters dropped).
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

func TestNoLongFunctions(t *testing.T) {
	lengths := funcLengths(t, "../..")
	if len(lengths) < 100 {
		t.Fatalf("found only %d functions under the module root: is the walk looking in the right place?", len(lengths))
	}
	var long []string
	for name, n := range lengths {
		if n > maxFuncLines {
			if _, ok := longFuncAllowed[name]; !ok {
				long = append(long, name)
			}
		}
	}
	sort.Strings(long)
	for _, name := range long {
		t.Errorf("%s is %d lines (limit %d): split it where its policy meets its plumbing", name, lengths[name], maxFuncLines)
	}
	for name, owner := range longFuncAllowed {
		if lengths[name] <= maxFuncLines {
			// Not an error: its owner may land the split before the list is edited.
			t.Logf("%s (%s) is no longer over %d lines (or gone): drop it from longFuncAllowed", name, owner, maxFuncLines)
		}
	}
}

// The counter itself: a function of exactly the limit passes, one line more is reported, and methods are
// named by their receiver type.
func TestFuncLengthCounter(t *testing.T) {
	dir := t.TempDir()
	body := func(lines int) string { return strings.Repeat("\t_ = 0\n", lines-2) }
	src := "package p\n\ntype T[X any] struct{}\n\nfunc ok() {\n" + body(maxFuncLines) + "}\n\n" +
		"func (*T[X]) long() {\n" + body(maxFuncLines+1) + "}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc skipped() {\n"+body(200)+"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := funcLengths(t, dir)
	if got["p.go:ok"] != maxFuncLines || got["p.go:T.long"] != maxFuncLines+1 {
		t.Errorf("lengths = %v, want p.go:ok=%d and p.go:T.long=%d", got, maxFuncLines, maxFuncLines+1)
	}
	if _, ok := got["p_test.go:skipped"]; ok {
		t.Errorf("test files must not be counted: %v", got)
	}
}
