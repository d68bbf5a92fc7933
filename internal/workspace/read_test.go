package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unicode/utf16"
)

func TestCleanPath(t *testing.T) {
	good := map[string]string{
		"a": "a", "a/b": "a/b", "./a//b/.": "a/b", ".": "", "a/": "a", "a/./b": "a/b", "é/ü.txt": "é/ü.txt",
		"..a/b..": "..a/b..",
	}
	for in, want := range good {
		got, err := cleanPath(in)
		if err != nil || got != want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{"", "/etc/passwd", "../x", "a/../b", "a/..", `a\b`, "C:x", "c:/x", "a\x00b", "\xff",
		strings.Repeat("a", 4097), strings.Repeat("😀", 2049)}
	for _, in := range bad {
		if _, err := cleanPath(in); err == nil {
			t.Errorf("cleanPath(%q) accepted", in)
		}
	}
	if _, err := cleanPath(strings.Repeat("a", 4096)); err != nil {
		t.Errorf("4096 units refused: %v", err)
	}
	if _, err := cleanPath(strings.Repeat("😀", 2048)); err != nil {
		t.Errorf("4096 units of surrogate pairs refused: %v", err)
	}
}

func TestComparePaths(t *testing.T) {
	order := []string{"A", "a/b/c", "a/b.txt", "a/c", "a.b", "b", "é"}
	for i := range order {
		for j := range order {
			got := comparePaths(order[i], order[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("comparePaths(%q, %q) = %d, want %d", order[i], order[j], got, want)
			}
		}
	}
}

func TestDecode(t *testing.T) {
	le := []byte{0xFF, 0xFE}
	for _, u := range utf16.Encode([]rune("hé😀\nx")) {
		le = append(le, byte(u), byte(u>>8))
	}
	be := []byte{0xFE, 0xFF}
	for _, u := range utf16.Encode([]rune("hé😀\nx")) {
		be = append(be, byte(u>>8), byte(u))
	}
	cases := []struct{ in, want string }{
		{"plain", "plain"},
		{"\xEF\xBB\xBFbom", "bom"},
		{string(le), "hé😀\nx"},
		{string(be), "hé😀\nx"},
		{"a\xE2\x82b", "a\uFFFDb"},             // truncated 3-byte sequence: one maximal subpart
		{"\xF0\x80\x80", "\uFFFD\uFFFD\uFFFD"}, // F0 80 is never valid: three subparts
		{"\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD"}, // encoded surrogate
		{"\xC0\xAF", "\uFFFD\uFFFD"},           // overlong
		{"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"x\xE2\x82", "x\uFFFD"},                                        // truncated at end of input
		{"\xFF\xFEa", "\uFFFD"},                                         // UTF-16 with a dangling odd byte
		{string([]byte{0xFF, 0xFE, 0x00, 0xD8, 0x41, 0x00}), "\uFFFDA"}, // unpaired high surrogate
		{"", ""}, {"\xEF\xBB", "\uFFFD"},
	}
	for _, c := range cases {
		if got := string(decodeAll([]byte(c.in))); got != c.want {
			t.Errorf("decode(%q) = %q, want %q", c.in, got, c.want)
		}
		// Any split into chunks gives the same text.
		for cut := 0; cut <= len(c.in); cut++ {
			var d decoder
			out := d.write(nil, []byte(c.in[:cut]))
			out = d.write(out, []byte(c.in[cut:]))
			out = d.flush(out)
			if string(out) != c.want {
				t.Errorf("decode(%q) split at %d = %q, want %q", c.in, cut, out, c.want)
			}
		}
	}
}

func TestReadFileLines(t *testing.T) {
	e := newEnv(t, Options{})
	e.write("crlf.txt", "one\r\ntwo\r\nthree\r\n")
	e.write("empty.txt", "")
	e.write("nl.txt", "\n")
	e.write("nofinal.txt", "a\nb")
	e.write("bom.txt", "\xEF\xBB\xBFbom line\nsecond")
	var u16 []byte
	u16 = append(u16, 0xFF, 0xFE)
	for _, u := range utf16.Encode([]rune("wide 😀\nline two\n")) {
		u16 = append(u16, byte(u), byte(u>>8))
	}
	e.write("utf16.txt", string(u16))

	type want struct {
		content    string
		start, end int
		truncated  bool
		next       int
	}
	cases := []struct {
		req string
		w   want
	}{
		{`{"path":"crlf.txt"}`, want{"one\r\ntwo\r\nthree\r", 1, 3, false, 0}},
		{`{"path":"crlf.txt","maxLines":2}`, want{"one\r\ntwo\r", 1, 2, true, 3}},
		{`{"path":"crlf.txt","startLine":3,"maxLines":1}`, want{"three\r", 3, 3, false, 0}},
		{`{"path":"crlf.txt","startLine":4}`, want{"", 4, 3, false, 0}},
		{`{"path":"crlf.txt","startLine":99}`, want{"", 99, 98, false, 0}},
		{`{"path":"empty.txt"}`, want{"", 1, 1, false, 0}},
		{`{"path":"empty.txt","startLine":2}`, want{"", 2, 1, false, 0}},
		{`{"path":"nl.txt"}`, want{"", 1, 1, false, 0}},
		{`{"path":"nofinal.txt","startLine":2}`, want{"b", 2, 2, false, 0}},
		{`{"path":"nofinal.txt","maxLines":1}`, want{"a", 1, 1, true, 2}},
		{`{"path":"bom.txt"}`, want{"bom line\nsecond", 1, 2, false, 0}},
		{`{"path":"utf16.txt"}`, want{"wide 😀\nline two", 1, 2, false, 0}},
	}
	for _, c := range cases {
		m := e.ok(OpReadFile, c.req)
		if m["content"] != c.w.content || int(m["startLine"].(float64)) != c.w.start ||
			int(m["endLine"].(float64)) != c.w.end || m["truncated"] != c.w.truncated {
			t.Errorf("%s: got %v, want %+v", c.req, m, c.w)
		}
		next, has := m["nextStartLine"]
		if has != c.w.truncated || (has && int(next.(float64)) != c.w.next) {
			t.Errorf("%s: nextStartLine %v, want %d (truncated %v)", c.req, next, c.w.next, c.w.truncated)
		}
		checkReadInvariants(t, m)
	}
	// The result echoes the caller's spelling (the shared validator requires result.path == request.path).
	if got := e.ok(OpReadFile, `{"path":"./crlf.txt"}`)["path"]; got != "./crlf.txt" {
		t.Errorf("path not echoed verbatim: %v", got)
	}
}

// checkReadInvariants applies the hub's §9.3 checks to a read_file result.
func checkReadInvariants(t *testing.T, m map[string]any) {
	t.Helper()
	start, end := int(m["startLine"].(float64)), int(m["endLine"].(float64))
	content := m["content"].(string)
	if end < start-1 {
		t.Errorf("endLine %d < startLine-1", end)
	}
	n := strings.Count(content, "\n") + 1
	if content == "" {
		if end-start+1 > 1 {
			t.Errorf("empty content for %d lines", end-start+1)
		}
	} else if n != end-start+1 {
		t.Errorf("content has %d lines, range says %d", n, end-start+1)
	}
	if next, ok := m["nextStartLine"]; ok != m["truncated"].(bool) || ok && int(next.(float64)) <= start {
		t.Errorf("nextStartLine %v inconsistent with truncated %v", next, m["truncated"])
	}
}

func TestReadFileLimits(t *testing.T) {
	e := newEnv(t, Options{})
	const MiB = 1 << 20
	e.write("exact.txt", strings.Repeat("x", MiB)+"\nnext\n")
	e.write("over.txt", strings.Repeat("x", MiB+1)+"\n")
	e.write("two.txt", strings.Repeat("a", MiB/2)+"\n"+strings.Repeat("b", MiB/2)+"\nc\n")
	e.write("many.txt", strings.Repeat("l\n", 600))

	m := e.ok(OpReadFile, `{"path":"exact.txt"}`)
	if len(m["content"].(string)) != MiB || m["truncated"] != true || m["nextStartLine"].(float64) != 2 {
		t.Errorf("a 1 MiB first line must fit and truncate before the next: %v", m["endLine"])
	}
	e.fail(OpReadFile, `{"path":"over.txt"}`, CodeReadLimitExceeded)
	// Second line (MiB/2 + separator) would exceed the budget: stop before it.
	m = e.ok(OpReadFile, `{"path":"two.txt"}`)
	if m["endLine"].(float64) != 1 || m["truncated"] != true || m["nextStartLine"].(float64) != 2 {
		t.Errorf("window should stop before the line that does not fit: %v %v", m["endLine"], m["truncated"])
	}
	m = e.ok(OpReadFile, `{"path":"two.txt","startLine":2}`)
	if m["endLine"].(float64) != 3 || m["truncated"] != false {
		t.Errorf("second window: %v %v", m["endLine"], m["truncated"])
	}

	m = e.ok(OpReadFile, `{"path":"many.txt","maxLines":500}`)
	if m["endLine"].(float64) != 500 || m["truncated"] != true {
		t.Errorf("maxLines 500: %v", m["endLine"])
	}
	m = e.ok(OpReadFile, `{"path":"many.txt","startLine":501,"maxLines":100}`)
	if m["endLine"].(float64) != 600 || m["truncated"] != false {
		t.Errorf("last window: %v %v", m["endLine"], m["truncated"])
	}
	m = e.ok(OpReadFile, `{"path":"many.txt"}`)
	if m["endLine"].(float64) != 200 {
		t.Errorf("default maxLines is 200, got %v", m["endLine"])
	}
	e.fail(OpReadFile, `{"path":"many.txt","maxLines":501}`, CodeInvalidRequest)
	e.fail(OpReadFile, `{"path":"many.txt","maxLines":0}`, CodeInvalidRequest)
	e.fail(OpReadFile, `{"path":"many.txt","startLine":0}`, CodeInvalidRequest)
	e.fail(OpReadFile, `{"path":"many.txt","startLine":1.5}`, CodeInvalidRequest)

	// The read deadline gives READ_LIMIT_EXCEEDED.
	old := toolDeadline
	toolDeadline = -1
	defer func() { toolDeadline = old }()
	e.fail(OpReadFile, `{"path":"many.txt"}`, CodeReadLimitExceeded)
}

func TestReadFileCancelled(t *testing.T) {
	e := newEnv(t, Options{})
	e.write("a.txt", "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.ws.Do(ctx, OpReadFile, json.RawMessage(`{"path":"a.txt"}`))
	if !errors.Is(err, ErrExecutionAborted) {
		t.Fatalf("cancelled read: %v", err)
	}
}

func TestReadFileBigFileStreams(t *testing.T) {
	// A file far larger than the content limit is readable window by window.
	e := newEnv(t, Options{})
	var b bytes.Buffer
	for i := 0; b.Len() < 3<<20; i++ {
		b.WriteString(strings.Repeat("z", 99) + "\n")
	}
	e.write("big.txt", b.String())
	lines := b.Len() / 100
	m := e.ok(OpReadFile, js(map[string]any{"path": "big.txt", "startLine": lines, "maxLines": 5}))
	if m["content"] != strings.Repeat("z", 99) || m["endLine"].(float64) != float64(lines) || m["truncated"] != false {
		t.Errorf("last line of a big file: %v %v", m["endLine"], m["truncated"])
	}
}

func TestConfinementReads(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		e := newEnv(t, Options{})
		e.write("in/real.txt", "inside\n")
		e.symlink(filepath.Join(e.outside, "secret.txt"), "abs-link.txt")
		e.symlink("../outside/secret.txt", "rel-link.txt")
		e.symlink(e.outside, "outdir")
		e.symlink("../outside", "outdir-rel")
		e.symlink("nowhere/at/all", "dangling.txt")
		e.symlink("in", "indir")
		e.symlink("in/real.txt", "inlink.txt")
		if err := syscall.Mkfifo(filepath.Join(e.root, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Differential: without the tools, each escape probe reaches the secret.
		for _, p := range []string{"abs-link.txt", "rel-link.txt", "outdir/secret.txt", "outdir-rel/secret.txt"} {
			if b, err := os.ReadFile(filepath.Join(e.root, p)); err != nil || string(b) != "TOP SECRET\n" {
				t.Fatalf("probe %s does not reach the secret without confinement: %v", p, err)
			}
		}
		for _, p := range []string{"abs-link.txt", "rel-link.txt", "outdir/secret.txt", "outdir-rel/secret.txt",
			"dangling.txt", "fifo", "in", ".", "missing.txt", "in/real.txt/x", "../outside/secret.txt",
			"/etc/passwd", "in/../../outside/secret.txt", "a\x00b", `in\real.txt`, "C:/x", "inlink.txt"} {
			e.fail(OpReadFile, js(map[string]any{"path": p}), CodeInvalidPath)
		}
		// A symlinked directory that stays inside the root may be traversed by reads.
		if got := e.ok(OpReadFile, `{"path":"indir/real.txt"}`)["content"]; got != "inside" {
			t.Errorf("in-root symlinked directory: %v", got)
		}
	})
}

// TestHardLinkOutsideRefused (red-team item 7): a hard link inside the root to a file outside it is no
// symlink, so read_file followed it and returned the outside file. Without the tools the link reaches
// the secret; read_file and the edit tools now refuse any file with more than one link, and search skips it.
func TestHardLinkOutsideRefused(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		e := newEnv(t, Options{AllowWrites: true})
		if err := os.Link(filepath.Join(e.outside, "secret.txt"), filepath.Join(e.root, "hard.txt")); err != nil {
			t.Skipf("cannot hard-link here: %v", err)
		}
		if b, err := os.ReadFile(filepath.Join(e.root, "hard.txt")); err != nil || string(b) != "TOP SECRET\n" {
			t.Fatalf("the hard link does not reach the secret without confinement: %v", err)
		}
		_, err := e.do(OpReadFile, `{"path":"hard.txt"}`)
		var we *Error
		if !errors.As(err, &we) || we.Code != CodeInvalidPath || !strings.Contains(we.Message, "hard link") {
			t.Fatalf("read_file through a hard link: %v", err)
		}
		if _, err := e.do(OpEditFile, `{"path":"hard.txt","oldText":"TOP","newText":"PWNED"}`); err == nil {
			t.Fatal("edit_file through a hard link succeeded")
		}
		if m := e.ok(OpSearchText, `{"query":"SECRET"}`); strings.Contains(fmt.Sprint(m), "hard.txt") {
			t.Errorf("search_text reads through a hard link: %v", m)
		}
		e.write("plain.txt", "TOP SECRET\n")
		if got := e.ok(OpReadFile, `{"path":"plain.txt"}`)["content"]; got != "TOP SECRET" {
			t.Errorf("a singly linked file: %v", got)
		}
		if b, _ := os.ReadFile(filepath.Join(e.outside, "secret.txt")); string(b) != "TOP SECRET\n" {
			t.Fatal("the outside file changed")
		}
	})
}
