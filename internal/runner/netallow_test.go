package runner

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/egress"
)

// metadata.network_allow may only narrow the operator's list: wider, or any list without one, is a 400
// that names the entry, before anything runs; a malformed value is a 400 too.
func TestNetworkAllowNarrowOnly(t *testing.T) {
	pol, err := egress.ParseList("*.example.com,10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	with := newRunner(t, func(c *Config) { c.NetworkAllow = pol })
	without := newRunner(t, nil)
	body := func(meta any) map[string]any {
		return map[string]any{"language": "bash", "version": "*", "files": []map[string]string{{"content": "echo ran"}},
			"metadata": map[string]any{"network_allow": meta}}
	}
	for _, tc := range []struct {
		name string
		tr   *testRunner
		meta any
		msg  string
	}{
		{"wider name", with, "pypi.org", `field "metadata.network_allow": invalid network allow-list: "pypi.org" is not on the operator's allow-list`},
		{"wider wildcard", with, "*.other.com", `"*.other.com" is wider than the operator's allow-list`},
		{"wider CIDR", with, "10.0.0.0/7", "is not on the operator's allow-list"},
		{"no list", without, "a.example.com", "this runner has no egress allow-list"},
		{"not a string", with, 3, "must be a string of comma-separated host names"},
	} {
		st, m, _ := tc.tr.do("POST", PathExecute, body(tc.meta), nil)
		if msg, _ := m["message"].(string); st != 400 || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %v, want 400 %q", tc.name, st, m, tc.msg)
		}
	}
	if p, e := with.networkAllow(map[string]json.RawMessage{"network_allow": json.RawMessage(`"a.example.com, 10.1.0.0/16"`)}); e != nil || len(*p) != 2 {
		t.Fatalf("narrower list: %v %v", p, e)
	}
}
