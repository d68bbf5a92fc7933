package runner

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestGolden replays Piston-compatible request/response pairs from testdata/golden through the HTTP
// handler. In expected responses "<installed>" is the probed version of the reply's language, "<ms>" and
// "<bytes>" accept any non-negative integer (times and memory vary run to run).
func TestGolden(t *testing.T) {
	tr := newRunner(t, nil)
	versions := map[string]string{}
	for _, rt := range tr.Runtimes() {
		versions[rt.Language] = rt.Version
	}
	files, err := filepath.Glob("testdata/golden/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var g struct {
				Request  json.RawMessage `json:"request"`
				Status   int             `json:"status"`
				Response map[string]any  `json:"response"`
			}
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			var probe struct {
				Language string `json:"language"`
			}
			_ = json.Unmarshal(g.Request, &probe)
			tr.t = t
			status, got, _ := tr.do(http.MethodPost, PathExecute, []byte(g.Request), nil)
			if status != g.Status {
				t.Fatalf("status %d, want %d; body %v", status, g.Status, got)
			}
			normalize(t, got, g.Response, versions)
			if !reflect.DeepEqual(got, g.Response) {
				gj, _ := json.MarshalIndent(got, "", "  ")
				wj, _ := json.MarshalIndent(g.Response, "", "  ")
				t.Errorf("response differs\n got: %s\nwant: %s", gj, wj)
			}
		})
	}
}

// normalize replaces, in got, the values the golden file leaves open by its placeholders, after checking
// they are of the right kind.
func normalize(t *testing.T, got, want map[string]any, versions map[string]string) {
	t.Helper()
	if want["version"] == "<installed>" {
		lang, _ := got["language"].(string)
		if got["version"] == versions[lang] && versions[lang] != "" {
			got["version"] = "<installed>"
		}
	}
	gr, _ := got["run"].(map[string]any)
	wr, _ := want["run"].(map[string]any)
	for k, w := range wr {
		if w != "<ms>" && w != "<bytes>" {
			continue
		}
		if n, ok := gr[k].(float64); ok && n >= 0 && n == float64(int64(n)) {
			gr[k] = w
		} else {
			t.Errorf("run.%s = %v, want a non-negative integer", k, gr[k])
		}
	}
}
