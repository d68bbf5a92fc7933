package runner

import (
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCheckName: every name the runner accepts stays inside the workspace, outside tmp/, and is the
// same path for the OS as for the client.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"main.py", "a/b/c.txt", "../x", "/etc/passwd", "a/../../b", "tmp/x", "tmp", "./a",
		"a//b", "a\\b", "", ".", "..", "a/./b", "tmpx/y", "x/tmp/y", "\x00", "é/ü.txt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if checkName(name) != "" {
			return
		}
		switch {
		case !filepath.IsLocal(name):
			t.Fatalf("accepted non-local name %q", name)
		case path.Clean(name) != name:
			t.Fatalf("accepted unclean name %q", name)
		case name == scratchDir || strings.HasPrefix(name, scratchDir+"/"):
			t.Fatalf("accepted a name in the scratch directory: %q", name)
		case strings.ContainsAny(name, "\x00\\"):
			t.Fatalf("accepted NUL or backslash: %q", name)
		}
	})
}

// FuzzDecodeRequest: arbitrary bodies never panic the decoder or the validator, and a request that
// validates has a usable entry point.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"language":"python","version":"*","files":[{"content":"print(1)"}]}`,
		`{"language":"bash","version":"5","files":[{"name":"a/b.sh","content":"ZWNobw==","encoding":"base64"}],"args":["x"],"env_vars":{"A":"b"}}`,
		`{"language":"js","version":"*","files":[{"content":"00","encoding":"hex"}],"run_timeout":5,"run_memory_limit":-1}`,
		`{"files":null}`, `[]`, `{"language":1}`, `{"language":"py","version":"*","files":[{}]}`,
	} {
		f.Add([]byte(s))
	}
	r := &Runner{cfg: Config{MaxRunTimeout: 10e9, MaxMemory: 1 << 30}, reserved: map[string]string{"PATH": "reserved"},
		runtimes: []Runtime{{Language: "python", Version: "3.11.2", Aliases: []string{"py"}}, {Language: "bash", Version: "5.2.15", Aliases: []string{"sh"}}}}
	r.runtimes[0].interp.Ext, r.runtimes[1].interp.Ext = ".py", ".sh"
	f.Fuzz(func(t *testing.T, body []byte) {
		var er ExecuteRequest
		if e := decodeRequest(body, &er); e != nil {
			if e.Status != 400 || e.Message == "" {
				t.Fatalf("decode error %d %q", e.Status, e.Message)
			}
			return
		}
		p, e := r.prepare(&er)
		if e != nil {
			if (e.Status != 400 && e.Status != 404) || e.Message == "" {
				t.Fatalf("prepare error %d %q", e.Status, e.Message)
			}
			return
		}
		if len(p.files) == 0 || checkName(p.files[0].name) != "" || p.timeout <= 0 || p.memory < minMemory {
			t.Fatalf("accepted request is not runnable: %+v", p)
		}
	})
}
