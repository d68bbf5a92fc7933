package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

func paths(m map[string]any) []string {
	out := []string{}
	for _, p := range m["paths"].([]any) {
		out = append(out, p.(string))
	}
	return out
}

func TestListFilesOrderAndFilter(t *testing.T) {
	needRG(t)
	forEachResolver(t, func(t *testing.T) {
		e := newEnv(t, Options{})
		for _, p := range []string{"a/b/c", "a/b.txt", "a/c", "a.b", "B", "é.txt", ".hidden", "d/.h/x", "a-b", "a b",
			"bad\xff.txt", `back\\slash`} {
			e.write(p, "x")
		}
		e.symlink(filepath.Join(e.outside, "secret.txt"), "link-out")
		e.symlink("a/c", "link-in")
		e.symlink(e.outside, "dir-out")
		if err := syscall.Mkfifo(filepath.Join(e.root, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		got := paths(e.ok(OpListFiles, `{}`))
		// Non-UTF-8 and backslash names cannot be addressed portably and are dropped.
		want := []string{"B", "a/b/c", "a/b.txt", "a/c", "a b", "a-b", "a.b", "é.txt"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("list:\n got %q\nwant %q", got, want)
		}
		if got := paths(e.ok(OpListFiles, `{"path":"a"}`)); strings.Join(got, "|") != "a/b/c|a/b.txt|a/c" {
			t.Errorf("scoped list: %q", got)
		}
		if got := paths(e.ok(OpListFiles, `{"path":"a/b.txt"}`)); strings.Join(got, "|") != "a/b.txt" {
			t.Errorf("file path lists just the file: %q", got)
		}
		m := e.ok(OpListFiles, `{"path":"a","afterPath":"a/b/c"}`)
		if got := paths(m); strings.Join(got, "|") != "a/b.txt|a/c" || m["truncated"] != false {
			t.Errorf("afterPath: %q", got)
		}
		if _, ok := m["nextAfterPath"]; ok {
			t.Errorf("nextAfterPath without truncation")
		}
		e.fail(OpListFiles, `{"path":"a","afterPath":"b"}`, CodeInvalidRequest)
		e.fail(OpListFiles, `{"afterPath":"../x"}`, CodeInvalidPath)
		e.fail(OpListFiles, `{"path":"dir-out"}`, CodeInvalidPath)
		e.fail(OpListFiles, `{"path":"nope"}`, CodeInvalidPath)
		e.fail(OpListFiles, `{"maxResults":501}`, CodeInvalidRequest)
		e.fail(OpListFiles, `{"maxResults":0}`, CodeInvalidRequest)
	})
}

func TestListFilesPaging(t *testing.T) {
	needRG(t)
	e := newEnv(t, Options{})
	var all []string
	for i := 0; i < 1200; i++ {
		p := fmt.Sprintf("d%d/f%04d.txt", i%7, i)
		if i%3 == 0 {
			p = fmt.Sprintf("f%04d", i)
		}
		e.write(p, "x")
		all = append(all, p)
	}
	sort.Slice(all, func(i, j int) bool { return comparePaths(all[i], all[j]) < 0 })

	for _, size := range []int{500, 37} {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("paging does not terminate")
			}
			req := map[string]any{"maxResults": size}
			if after != "" {
				req["afterPath"] = after
			}
			m := e.ok(OpListFiles, js(req))
			ps := paths(m)
			if len(ps) > size {
				t.Fatalf("page of %d > maxResults %d", len(ps), size)
			}
			got = append(got, ps...)
			if m["truncated"] != true {
				if _, ok := m["nextAfterPath"]; ok {
					t.Fatal("nextAfterPath on the last page")
				}
				break
			}
			after = m["nextAfterPath"].(string)
			if after != ps[len(ps)-1] {
				t.Fatalf("nextAfterPath %q is not the last path %q", after, ps[len(ps)-1])
			}
		}
		if strings.Join(got, "\n") != strings.Join(all, "\n") {
			t.Fatalf("maxResults %d: paging returned %d paths, want %d in path order", size, len(got), len(all))
		}
	}
	// Exactly maxResults remaining: not truncated.
	m := e.ok(OpListFiles, js(map[string]any{"maxResults": 500, "afterPath": all[len(all)-501]}))
	if len(paths(m)) != 500 || m["truncated"] != false {
		t.Errorf("last full page: %d truncated %v", len(paths(m)), m["truncated"])
	}
}

func TestListDropsSwappedEntries(t *testing.T) {
	// An entry rg reported that is a symlink by the time it is checked must be dropped: emulate with an rg
	// that reports a name which is really a symlink to outside.
	fake := filepath.Join(t.TempDir(), "rg")
	script := "#!/bin/sh\nprintf 'a.txt\\000evil/secret.txt\\000z.txt\\000'\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	forEachResolver(t, func(t *testing.T) {
		e := newEnv(t, Options{RipgrepPath: fake})
		e.write("a.txt", "x")
		e.write("z.txt", "x")
		e.symlink(e.outside, "evil")
		if got := paths(e.ok(OpListFiles, `{}`)); strings.Join(got, "|") != "a.txt|z.txt" {
			t.Errorf("escaping entry listed: %q", got)
		}
		// Search reads each candidate through the confined open: the secret is never matched.
		if ms := matches(e.ok(OpSearchText, `{"query":"SECRET"}`)); len(ms) != 0 {
			t.Errorf("search reached outside the root: %v", ms)
		}
	})
}
