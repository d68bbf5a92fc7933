package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
)

func needRG(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/rg"); err != nil {
		if p, _ := (&Workspace{}).rgPath(); p == "" {
			t.Skip("ripgrep (rg) is not installed: apt-get install ripgrep")
		}
	}
}

func matches(m map[string]any) []map[string]any {
	var out []map[string]any
	for _, x := range m["matches"].([]any) {
		out = append(out, x.(map[string]any))
	}
	return out
}

func TestSearchText(t *testing.T) {
	needRG(t)
	e := newEnv(t, Options{})
	e.write("a.txt", "needle one needle\r\nnothing\nx needle\n")
	e.write("sub/b.txt", "😀needle\n")
	e.write(".hidden/c.txt", "needle\n")
	e.write(".dot.txt", "needle\n")
	e.write("ignored.log", "needle\n")
	e.write(".ignore", "*.log\n")
	e.write("big.txt", strings.Repeat("needle\n", (1<<20)/7+1))
	e.symlink(filepath.Join(e.outside, "secret.txt"), "link.txt")
	if err := os.WriteFile(filepath.Join(e.outside, "secret.txt"), []byte("needle in the secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	m := e.ok(OpSearchText, `{"query":"needle"}`)
	got := []string{}
	for _, x := range matches(m) {
		got = append(got, fmt.Sprintf("%s:%v:%v:%s", x["path"], x["line"], x["column"], x["text"]))
	}
	want := []string{"a.txt:1:1:needle one needle", "a.txt:3:3:x needle", "sub/b.txt:1:3:😀needle"}
	if strings.Join(got, "|") != strings.Join(want, "|") || m["truncated"] != false {
		t.Errorf("matches:\n got %q\nwant %q (truncated %v)", got, want, m["truncated"])
	}
	// The caller's spelling of path, normalised.
	m = e.ok(OpSearchText, `{"query":"needle","path":"./sub//"}`)
	if ms := matches(m); len(ms) != 1 || ms[0]["path"] != "sub/b.txt" {
		t.Errorf("scoped search: %v", ms)
	}
	m = e.ok(OpSearchText, `{"query":"needle","path":"a.txt","maxResults":1}`)
	if ms := matches(m); len(ms) != 1 || m["truncated"] != true {
		t.Errorf("maxResults 1 should truncate: %v", m)
	}
	m = e.ok(OpSearchText, `{"query":"needle","path":"a.txt","maxResults":2}`)
	if ms := matches(m); len(ms) != 2 || m["truncated"] != false {
		t.Errorf("exactly maxResults matches is not truncated: %v", m)
	}
	if ms := matches(e.ok(OpSearchText, `{"query":"nomatch-anywhere"}`)); len(ms) != 0 {
		t.Errorf("unexpected matches %v", ms)
	}

	e.ok(OpSearchText, `{"query":"x","maxResults":200}`)
	e.fail(OpSearchText, `{"query":"x","maxResults":201}`, CodeInvalidRequest)
	e.fail(OpSearchText, `{"query":"x","maxResults":0}`, CodeInvalidRequest)
	e.fail(OpSearchText, `{"query":""}`, CodeInvalidRequest)
	for _, q := range []string{"a\x00b", "a\rb", "a\nb"} {
		e.fail(OpSearchText, js(map[string]any{"query": q}), CodeInvalidRequest)
	}
	e.ok(OpSearchText, js(map[string]any{"query": strings.Repeat("q", 2000)}))
	e.fail(OpSearchText, js(map[string]any{"query": strings.Repeat("q", 2001)}), CodeInvalidRequest)
	e.ok(OpSearchText, js(map[string]any{"query": strings.Repeat("é", 1000)}))
	e.fail(OpSearchText, js(map[string]any{"query": strings.Repeat("é", 1000) + "x"}), CodeInvalidRequest)
	for _, p := range []string{"../outside", "/tmp", "missing", "link.txt", "a\x00"} {
		e.fail(OpSearchText, js(map[string]any{"query": "needle", "path": p}), CodeInvalidPath)
	}
}

func TestSearchGitignore(t *testing.T) {
	needRG(t)
	e := newEnv(t, Options{})
	if err := os.Mkdir(filepath.Join(e.root, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.write(".gitignore", "build/\n")
	e.write("build/out.txt", "needle\n")
	e.write("src/in.txt", "needle\n")
	ms := matches(e.ok(OpSearchText, `{"query":"needle"}`))
	if len(ms) != 1 || ms[0]["path"] != "src/in.txt" {
		t.Errorf("gitignored files must not be searched: %v", ms)
	}
}

func TestSearchMatchWindow(t *testing.T) {
	needRG(t)
	e := newEnv(t, Options{})
	// A long line: the window is 2000 units around the match and must contain the query.
	line := strings.Repeat("a", 5000) + "NEEDLE" + strings.Repeat("b", 5000)
	// Surrogate pairs around both window edges: the window is shrunk rather than split a pair.
	emoji := strings.Repeat("😀", 3000) + "NEEDLE" + strings.Repeat("😀", 3000)
	e.write("long.txt", line+"\n"+emoji+"\n")
	for _, m := range matches(e.ok(OpSearchText, `{"query":"NEEDLE"}`)) {
		text := m["text"].(string)
		units := len(utf16.Encode([]rune(text)))
		if units > 2000 || units < 1998 || !strings.Contains(text, "NEEDLE") || strings.ContainsRune(text, '\uFFFD') {
			t.Errorf("line %v: window of %d units, contains query %v", m["line"], units, strings.Contains(text, "NEEDLE"))
		}
	}
	// Exact position for the ASCII line: start = col0 - floor((2000-6)/2) = 5000-997.
	if w := matchWindow(line, 5000, 6); w != line[5000-997:5000-997+2000] {
		t.Errorf("window start wrong")
	}
	// Near the end of the line the window is pinned to the last 2000 units.
	if w := matchWindow(line, 9990, 6); w != line[len(line)-2000:] {
		t.Errorf("window not pinned to the end")
	}
	// Column counts UTF-16 units: 3000 emoji = 6000 units.
	ms := matches(e.ok(OpSearchText, `{"query":"NEEDLE","path":"long.txt"}`))
	if len(ms) != 2 || ms[1]["column"].(float64) != 6001 || ms[0]["column"].(float64) != 5001 {
		t.Errorf("columns: %v", ms)
	}
}

func TestSearchAndListWithoutRipgrep(t *testing.T) {
	e := newEnv(t, Options{RipgrepPath: filepath.Join(t.TempDir(), "no-rg")})
	e.write("a.txt", "x\n")
	if err := e.fail(OpSearchText, `{"query":"x"}`, CodeSearchUnavailable); !strings.Contains(err.Message, "apt-get install ripgrep") {
		t.Errorf("message must say how to install rg: %q", err.Message)
	}
	if err := e.fail(OpListFiles, `{}`, CodeListUnavailable); !strings.Contains(err.Message, "apt-get install ripgrep") {
		t.Errorf("message must say how to install rg: %q", err.Message)
	}
}

func TestEnumeratorFailure(t *testing.T) {
	// An rg that exits 2 (its error status) is an enumerator failure.
	fake := filepath.Join(t.TempDir(), "rg")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'rg: broken' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Options{RipgrepPath: fake})
	e.fail(OpSearchText, `{"query":"x"}`, CodeSearchUnavailable)
	e.fail(OpListFiles, `{}`, CodeListUnavailable)
}

func TestSearchAndListDeadline(t *testing.T) {
	needRG(t)
	e := newEnv(t, Options{})
	e.write("a.txt", "x\n")
	old := toolDeadline
	toolDeadline = -1
	defer func() { toolDeadline = old }()
	e.fail(OpSearchText, `{"query":"x"}`, CodeSearchTimeout)
	e.fail(OpListFiles, `{}`, CodeListTimeout)
}

func TestSearchCandidateCaps(t *testing.T) {
	needRG(t)
	e := newEnv(t, Options{})
	for _, p := range []string{"a.txt", "b.txt", "c.txt"} {
		e.write(p, "hit\n")
	}
	defer func(n, b int) { maxSearchCandidate, maxCandidateBytes = n, b }(maxSearchCandidate, maxCandidateBytes)
	maxSearchCandidate = 3
	if m := e.ok(OpSearchText, `{"query":"hit"}`); len(matches(m)) != 3 || m["truncated"] != false {
		t.Errorf("exactly the candidate cap: %v", m)
	}
	maxSearchCandidate = 2
	if m := e.ok(OpSearchText, `{"query":"hit"}`); len(matches(m)) != 2 || m["truncated"] != true {
		t.Errorf("one candidate over the cap: %v", m)
	}
	maxSearchCandidate = 20000
	maxCandidateBytes = len("a.txt") + len("b.txt") + len("c.txt")
	if m := e.ok(OpSearchText, `{"query":"hit"}`); len(matches(m)) != 3 || m["truncated"] != false {
		t.Errorf("exactly the name-bytes cap: %v", m)
	}
	maxCandidateBytes--
	if m := e.ok(OpSearchText, `{"query":"hit"}`); len(matches(m)) != 2 || m["truncated"] != true {
		t.Errorf("one byte over the name-bytes cap: %v", m)
	}
}
