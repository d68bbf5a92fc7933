package runner

import (
	"slices"

	"github.com/codellm/codellm/internal/interp"
)

// pistonName is how Piston lists a language: its language name, the package that provides it when
// the names differ (Piston's "runtime"), and its aliases (engineer-man/piston packages/*/metadata.json).
type pistonName struct {
	language, runtime string
	aliases           []string
}

// pistonNames maps codellm's canonical interpreter names to Piston's. Interpreters not listed keep their
// own name and labels.
var pistonNames = map[string]pistonName{
	"python":     {"python", "", []string{"py", "py3", "python3"}},
	"node":       {"javascript", "node", []string{"node-javascript", "node-js", "javascript", "js"}},
	"typescript": {"typescript", "", []string{"ts", "node-ts", "tsc"}},
	"bash":       {"bash", "", []string{"sh"}},
	"c":          {"c", "gcc", []string{"gcc"}},
	"cpp":        {"c++", "gcc", []string{"cpp", "g++"}},
	"d":          {"d", "gcc", []string{"gdc"}},
	"fortran":    {"fortran", "gcc", []string{"fortran", "f90"}},
	"java":       {"java", "", []string{}},
	"rust":       {"rust", "", []string{"rs"}},
	"go":         {"go", "", []string{"go", "golang"}},
	"php":        {"php", "", []string{}},
	"r":          {"rscript", "", []string{"r"}},
	"ruby":       {"ruby", "", []string{"ruby3", "rb"}},
	"perl":       {"perl", "", []string{"pl"}},
}

// pistonRuntime is the runtimes entry of one enabled interpreter.
func pistonRuntime(in interp.Interpreter, path string) Runtime {
	rt := Runtime{Language: in.Name, interp: in, path: path}
	var aliases []string
	if p, ok := pistonNames[in.Name]; ok {
		rt.Language, rt.Runtime = p.language, p.runtime
		aliases = slices.Clone(p.aliases)
	}
	// The registry's labels, codellm's own name among them, keep working as aliases.
	for _, l := range append([]string{in.Name}, in.Labels...) {
		if l != rt.Language && !slices.Contains(aliases, l) {
			aliases = append(aliases, l)
		}
	}
	if aliases == nil {
		aliases = []string{}
	}
	rt.Aliases = aliases
	return rt
}

// newer reports whether version a is above b (unparsable versions are never newer).
func newer(a, b string) bool {
	va, ok1 := parsePartial(a)
	vb, ok2 := parsePartial(b)
	return ok1 && (!ok2 || va.cmp(vb) > 0)
}
