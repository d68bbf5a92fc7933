package runner

import (
	"os"
	"path/filepath"
	"testing"
)

// librechatLanguages are LibreChat's 13 lang values under Piston's names, with their test program
// (Piston's convention: it prints OK).
var librechatLanguages = []struct{ lang, file string }{
	{"python", "main.py"}, {"javascript", "main.js"}, {"typescript", "main.ts"}, {"c", "main.c"},
	{"c++", "main.cpp"}, {"java", "Main.java"}, {"php", "main.php"}, {"rust", "main.rs"}, {"go", "main.go"},
	{"d", "main.d"}, {"fortran", "main.f90"}, {"rscript", "main.r"}, {"bash", "main.sh"},
}

// TestLanguagesPrintOK runs every language's test program in the sandbox. A language whose toolchain is
// not installed is not listed and is skipped, except in CI (CODELLM_REQUIRE_SANDBOX=1), which installs them.
func TestLanguagesPrintOK(t *testing.T) {
	tr := newRunner(t, nil)
	for _, l := range librechatLanguages {
		t.Run(l.lang, func(t *testing.T) {
			rt, ok := tr.findRuntime(l.lang, "*")
			if !ok {
				if requireSandbox() {
					t.Fatalf("%s is not installed (.ci/run installs its toolchain)", l.lang)
				}
				t.Skipf("%s is not installed", l.lang)
			}
			src, err := os.ReadFile(filepath.Join("testdata", "ok", l.file))
			if err != nil {
				t.Fatal(err)
			}
			req := ExecuteRequest{Language: l.lang, Version: "*", Files: []File{{Name: l.file, Content: ptr(string(src))}}}
			resp, err := tr.Execute(t.Context(), "", req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Run.Stdout != "OK\n" || resp.Run.Status != nil {
				t.Fatalf("%s %s: run %+v compile %+v", rt.Language, rt.Version, resp.Run, resp.Compile)
			}
			if rt.interp.Compiled() != (resp.Compile != nil) {
				t.Fatalf("compile stage %+v for compiled=%v", resp.Compile, rt.interp.Compiled())
			}
			if len(resp.Files) != 0 {
				t.Fatalf("build products listed as files out: %+v", resp.Files)
			}
		})
	}
}

// TestCompileError: a compile that fails is reported in "compile", and nothing runs.
func TestCompileError(t *testing.T) {
	tr := newRunner(t, nil)
	if _, ok := tr.findRuntime("c", "*"); !ok && !requireSandbox() {
		t.Skip("gcc is not installed")
	}
	req := ExecuteRequest{Language: "c", Version: "*", Files: []File{{Name: "main.c", Content: ptr("int main( { return 0; }")}}}
	resp, err := tr.Execute(t.Context(), "", req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Compile == nil || resp.Compile.Code == nil || *resp.Compile.Code == 0 || resp.Compile.Stderr == "" {
		t.Fatalf("compile %+v", resp.Compile)
	}
	if resp.Run.Status == nil || *resp.Run.Status != StatusRuntimeError || resp.Run.Stdout != "" {
		t.Fatalf("run after a failed compile: %+v", resp.Run)
	}
	// compile_timeout is the compile's own limit.
	req = ExecuteRequest{Language: "c", Version: "*", CompileTimeout: ptr(float64(1)),
		Files: []File{{Name: "main.c", Content: ptr("int main(void) { return 0; }")}}}
	if resp, err = tr.Execute(t.Context(), "", req); err != nil || resp.Compile.Status == nil || *resp.Compile.Status != StatusTimeout {
		t.Fatalf("compile_timeout: %v %+v", err, resp)
	}
}
