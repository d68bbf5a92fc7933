package runner

import (
	"net/http"
	"testing"

	"github.com/codellm/codellm/internal/packages"
)

// GET /api/v2/packages lists the operator's sets in Piston's shape (language, language_version,
// installed) with their names and contents; none is an empty list, not null.
func TestPackagesRoute(t *testing.T) {
	empty := newRunner(t, nil)
	if code, out, _ := empty.do(http.MethodGet, PathPackages, nil, nil); code != 200 || len(out["array"].([]any)) != 0 {
		t.Fatalf("no sets: %d %v", code, out)
	}
	tr := newRunner(t, func(c *Config) {
		c.Packages = []packages.Set{{Name: "greet", Language: "python", LanguageVersion: "3.11.2", Packages: []packages.Package{{Name: "greet", Version: "1.0"}}}}
	})
	code, out, _ := tr.do(http.MethodGet, PathPackages, nil, nil)
	list := out["array"].([]any)
	if code != 200 || len(list) != 1 {
		t.Fatalf("%d %v", code, out)
	}
	e := list[0].(map[string]any)
	if e["language"] != "python" || e["language_version"] != "3.11.2" || e["installed"] != true || e["name"] != "greet" ||
		e["packages"].([]any)[0].(map[string]any)["version"] != "1.0" {
		t.Fatalf("entry %v", e)
	}
}
