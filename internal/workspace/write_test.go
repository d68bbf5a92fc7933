package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

func TestWriteFile(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		ro := newEnv(t, Options{})
		ro.write("a.txt", "old")
		ro.fail(OpWriteFile, `{"path":"a.txt","content":"new"}`, CodeWriteDisabled)
		ro.fail(OpEditFile, `{"path":"a.txt","oldText":"old","newText":"new"}`, CodeWriteDisabled)
		ro.fail(OpPreviewEdit, `{"path":"a.txt","oldText":"old","newText":"new"}`, CodeWriteDisabled)
		if ro.read("a.txt") != "old" {
			t.Fatal("read-only workspace was modified")
		}

		e := newEnv(t, Options{AllowWrites: true})
		m := e.ok(OpWriteFile, `{"path":"new.txt","content":"héllo\r\n"}`)
		if m["created"] != true || m["bytesWritten"].(float64) != 8 || m["path"] != "new.txt" {
			t.Errorf("create: %v", m)
		}
		if e.read("new.txt") != "héllo\r\n" {
			t.Errorf("content not written verbatim")
		}
		if fi, _ := os.Stat(filepath.Join(e.root, "new.txt")); fi.Mode().Perm() != 0o600 {
			t.Errorf("new file mode %v, want 0600", fi.Mode().Perm())
		}
		e.write("keep.sh", "#!/bin/sh\n")
		os.Chmod(filepath.Join(e.root, "keep.sh"), 0o751)
		m = e.ok(OpWriteFile, `{"path":"keep.sh","content":"#!/bin/sh\necho hi\n"}`)
		if m["created"] != false {
			t.Errorf("replace reported created")
		}
		if fi, _ := os.Stat(filepath.Join(e.root, "keep.sh")); fi.Mode().Perm() != 0o751 {
			t.Errorf("replaced file mode %v, want 0751", fi.Mode().Perm())
		}
		e.fail(OpWriteFile, `{"path":"keep.sh","content":"x","overwrite":false}`, CodeEditConflict)
		if e.read("keep.sh") != "#!/bin/sh\necho hi\n" {
			t.Errorf("create conflict modified the file")
		}
		if m := e.ok(OpWriteFile, `{"path":"created.txt","content":"","overwrite":false}`); m["created"] != true {
			t.Errorf("create mode: %v", m)
		}

		const MiB = 1 << 20
		e.ok(OpWriteFile, js(map[string]any{"path": "mib.txt", "content": strings.Repeat("m", MiB)}))
		e.fail(OpWriteFile, js(map[string]any{"path": "mib.txt", "content": strings.Repeat("m", MiB+1)}), CodeWriteLimitExceeded)
		if len(e.read("mib.txt")) != MiB {
			t.Errorf("rejected write changed the file")
		}

		e.write("dir/x.txt", "x")
		e.symlink("dir", "dirlink")
		e.symlink(e.outside, "outlink")
		e.symlink("dir/x.txt", "filelink")
		e.symlink(filepath.Join(e.outside, "secret.txt"), "secretlink")
		e.symlink(filepath.Join(e.outside, "nonexistent"), "dangling")
		for _, p := range []string{"missing/x.txt", "dirlink/y.txt", "outlink/y.txt", "filelink", "secretlink",
			"dangling", "dir", ".", "../outside/x", "/tmp/x", "dir/x.txt/y", "a\x00b"} {
			e.fail(OpWriteFile, js(map[string]any{"path": p, "content": "pwned"}), CodeInvalidPath)
		}
		if b, _ := os.ReadFile(filepath.Join(e.outside, "secret.txt")); string(b) != "TOP SECRET\n" {
			t.Fatal("write reached outside the root")
		}
		if _, err := os.Lstat(filepath.Join(e.outside, "nonexistent")); err == nil {
			t.Fatal("write through a dangling symlink created a file outside")
		}
		if _, err := os.Lstat(filepath.Join(e.outside, "y.txt")); err == nil {
			t.Fatal("write through a directory symlink created a file outside")
		}
		e.fail(OpWriteFile, `{"path":"x.txt"}`, CodeInvalidRequest)
		e.noTempFiles()
	})
}

func TestEditFile(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		e := newEnv(t, Options{AllowWrites: true})
		e.write("crlf.txt", "one\r\ntwo\r\nthree\r\n")
		m := e.ok(OpEditFile, `{"path":"crlf.txt","oldText":"two","newText":"TWO"}`)
		if e.read("crlf.txt") != "one\r\nTWO\r\nthree\r\n" || m["replacements"].(float64) != 1 || m["bytesWritten"].(float64) != 17 {
			t.Errorf("single edit: %q %v", e.read("crlf.txt"), m)
		}
		// Batch: applied in order, each to the previous result.
		m = e.ok(OpEditFile, `{"path":"crlf.txt","edits":[{"oldText":"one","newText":"uno"},{"oldText":"uno\r\nTWO","newText":"1-2"}]}`)
		if e.read("crlf.txt") != "1-2\r\nthree\r\n" || m["replacements"].(float64) != 2 {
			t.Errorf("batch edit: %q %v", e.read("crlf.txt"), m)
		}

		e.write("aaa.txt", "aaa")
		e.fail(OpEditFile, `{"path":"aaa.txt","oldText":"aa","newText":"b"}`, CodeEditConflict) // overlapping twice
		e.fail(OpEditFile, `{"path":"aaa.txt","oldText":"zz","newText":"b"}`, CodeEditConflict)
		e.write("twice.txt", "x y x")
		e.fail(OpEditFile, `{"path":"twice.txt","oldText":"x","newText":"z"}`, CodeEditConflict)
		// A batch fails as a whole when any edit does not match exactly once.
		e.fail(OpEditFile, `{"path":"twice.txt","edits":[{"oldText":"y","newText":"Y"},{"oldText":"x","newText":"z"}]}`, CodeEditConflict)
		if e.read("twice.txt") != "x y x" || e.read("aaa.txt") != "aaa" {
			t.Errorf("failed edits changed files")
		}

		// Base hash: a mismatch conflicts; the right hash (any case) applies.
		e.write("h.txt", "hash me")
		sum := sha256.Sum256([]byte("hash me"))
		good := hex.EncodeToString(sum[:])
		e.fail(OpEditFile, js(map[string]any{"path": "h.txt", "oldText": "me", "newText": "you", "expectedBaseSha256": strings.Repeat("0", 64)}), CodeEditConflict)
		e.fail(OpEditFile, js(map[string]any{"path": "h.txt", "oldText": "me", "newText": "you", "expectedBaseSha256": "abc"}), CodeInvalidRequest)
		e.ok(OpEditFile, js(map[string]any{"path": "h.txt", "oldText": "me", "newText": "you", "expectedBaseSha256": strings.ToUpper(good)}))
		if e.read("h.txt") != "hash you" {
			t.Errorf("hash-checked edit not applied")
		}
		e.fail(OpPreviewEdit, js(map[string]any{"path": "h.txt", "oldText": "you", "newText": "x", "expectedBaseSha256": good}), CodeInvalidRequest)

		// BOM: removed for matching, restored on write, counted in bytesWritten; preview reports it.
		e.write("bom.txt", "\xEF\xBB\xBFhello")
		p := e.ok(OpPreviewEdit, `{"path":"bom.txt","oldText":"hello","newText":"bye"}`)
		raw := sha256.Sum256([]byte("\xEF\xBB\xBFhello"))
		if p["content"] != "bye" || p["hasUtf8Bom"] != true || p["bytesWritten"].(float64) != 6 ||
			p["baseSha256"] != hex.EncodeToString(raw[:]) || p["replacements"].(float64) != 1 {
			t.Errorf("preview: %v", p)
		}
		if e.read("bom.txt") != "\xEF\xBB\xBFhello" {
			t.Errorf("preview wrote the file")
		}
		m = e.ok(OpEditFile, `{"path":"bom.txt","oldText":"hello","newText":"bye"}`)
		if e.read("bom.txt") != "\xEF\xBB\xBFbye" || m["bytesWritten"].(float64) != 6 {
			t.Errorf("BOM not preserved: %q", e.read("bom.txt"))
		}

		// Non-UTF-8 (UTF-16 included) is refused for edits.
		e.write("latin1.txt", "caf\xe9")
		e.fail(OpEditFile, `{"path":"latin1.txt","oldText":"caf","newText":"x"}`, CodeInvalidRequest)
		e.write("u16.txt", "\xFF\xFEa\x00")
		e.fail(OpEditFile, `{"path":"u16.txt","oldText":"a","newText":"x"}`, CodeInvalidRequest)

		// Request forms.
		e.fail(OpEditFile, `{"path":"h.txt","oldText":"a","newText":"b","edits":[{"oldText":"a","newText":"b"}]}`, CodeInvalidRequest)
		e.fail(OpEditFile, `{"path":"h.txt"}`, CodeInvalidRequest)
		e.fail(OpEditFile, `{"path":"h.txt","oldText":"a"}`, CodeInvalidRequest)
		e.fail(OpEditFile, `{"path":"h.txt","oldText":"","newText":"b"}`, CodeInvalidRequest)
		e.fail(OpEditFile, `{"path":"h.txt","edits":[]}`, CodeInvalidRequest)
		e.fail(OpEditFile, `{"path":"h.txt","edits":[{"oldText":"a"}]}`, CodeInvalidRequest)
		e.fail(OpEditFile, `{"path":"h.txt","edits":[{"oldText":"a","newText":"b","x":1}]}`, CodeInvalidRequest)

		// 100 edits is the limit.
		var src strings.Builder
		var edits []map[string]string
		for i := 0; i < 101; i++ {
			src.WriteString("<" + itoa(i) + ">")
			edits = append(edits, map[string]string{"oldText": "<" + itoa(i) + ">", "newText": "[" + itoa(i) + "]"})
		}
		e.write("many.txt", src.String())
		e.fail(OpEditFile, js(map[string]any{"path": "many.txt", "edits": edits}), CodeInvalidRequest)
		if m := e.ok(OpEditFile, js(map[string]any{"path": "many.txt", "edits": edits[:100]})); m["replacements"].(float64) != 100 {
			t.Errorf("100 edits: %v", m)
		}

		// Size limits.
		const MiB = 1 << 20
		e.write("big.txt", strings.Repeat("b", MiB-1)+"X")
		e.write("toobig.txt", strings.Repeat("b", MiB)+"X")
		e.fail(OpEditFile, `{"path":"toobig.txt","oldText":"X","newText":"Y"}`, CodeWriteLimitExceeded)
		e.fail(OpPreviewEdit, `{"path":"toobig.txt","oldText":"X","newText":"Y"}`, CodeReadLimitExceeded)
		e.fail(OpEditFile, `{"path":"big.txt","oldText":"X","newText":"YY"}`, CodeWriteLimitExceeded)
		e.ok(OpEditFile, `{"path":"big.txt","oldText":"X","newText":"Y"}`)
		e.fail(OpEditFile, js(map[string]any{"path": "big.txt", "oldText": "Y", "newText": strings.Repeat("n", MiB+1)}), CodeInvalidRequest)
		e.fail(OpEditFile, js(map[string]any{"path": "big.txt", "edits": []map[string]string{{"oldText": "Y", "newText": strings.Repeat("n", MiB)}}}), CodeInvalidRequest)

		// Symlinks are never edited, not even in-root ones.
		e.symlink("h.txt", "hlink")
		e.symlink(filepath.Join(e.outside, "secret.txt"), "slink")
		e.fail(OpEditFile, `{"path":"hlink","oldText":"hash","newText":"x"}`, CodeInvalidPath)
		e.fail(OpEditFile, `{"path":"slink","oldText":"TOP","newText":"x"}`, CodeInvalidPath)
		e.fail(OpEditFile, `{"path":"missing.txt","oldText":"a","newText":"x"}`, CodeInvalidPath)
		e.noTempFiles()
	})
}

// TestWriteRaces changes the target between the steps of an install (through the test hook) and checks the
// §9.6/§9.7 re-checks catch it.
func TestWriteRaces(t *testing.T) {
	defer func() { writeHook = nil }()
	forEachResolver(t, func(t *testing.T) {
		e := newEnv(t, Options{AllowWrites: true})
		target := filepath.Join(e.root, "t.txt")

		// Edit: the file's bytes change (same inode) after it was read.
		e.write("t.txt", "base")
		writeHook = func(step string) {
			if step == "staged" {
				os.WriteFile(target, []byte("theirs"), 0o644)
			}
		}
		e.fail(OpEditFile, `{"path":"t.txt","oldText":"base","newText":"mine"}`, CodeEditConflict)
		if e.read("t.txt") != "theirs" {
			t.Errorf("concurrent change lost")
		}
		// Edit: the file is replaced by another inode.
		e.write("t.txt", "base")
		writeHook = func(step string) {
			if step == "staged" {
				os.WriteFile(target+".new", []byte("base"), 0o644)
				os.Rename(target+".new", target)
			}
		}
		e.fail(OpEditFile, `{"path":"t.txt","oldText":"base","newText":"mine"}`, CodeEditConflict)
		// Create: the target appears meanwhile.
		os.Remove(target)
		writeHook = func(step string) {
			if step == "staged" {
				os.WriteFile(target, []byte("theirs"), 0o644)
			}
		}
		e.fail(OpWriteFile, `{"path":"t.txt","content":"mine"}`, CodeEditConflict)
		if e.read("t.txt") != "theirs" {
			t.Errorf("file created concurrently was clobbered")
		}
		// Create: the target appears between the re-check and the link (EEXIST).
		os.Remove(target)
		writeHook = func(step string) {
			if step == "checked" {
				os.WriteFile(target, []byte("theirs"), 0o644)
			}
		}
		e.fail(OpWriteFile, `{"path":"t.txt","content":"mine","overwrite":false}`, CodeEditConflict)
		if e.read("t.txt") != "theirs" {
			t.Errorf("file created concurrently was clobbered")
		}
		// The parent directory is swapped for another one after staging.
		e.write("p/t.txt", "old")
		writeHook = func(step string) {
			if step == "staged" {
				os.Rename(filepath.Join(e.root, "p"), filepath.Join(e.root, "p.old"))
				os.Mkdir(filepath.Join(e.root, "p"), 0o755)
			}
		}
		e.fail(OpWriteFile, `{"path":"p/t.txt","content":"new"}`, CodeInvalidPath)
		// Verification: the installed file is replaced before it is re-read: may have committed.
		writeHook = func(step string) {
			if step == "installed" {
				os.WriteFile(target+".x", []byte("other"), 0o644)
				os.Rename(target+".x", target)
			}
		}
		we := e.fail(OpWriteFile, `{"path":"t.txt","content":"mine"}`, CodeWriteUnavailable)
		if !we.MayHaveCommitted {
			t.Errorf("a failed verification must be marked may-have-committed")
		}
		writeHook = nil
		os.RemoveAll(filepath.Join(e.root, "p.old"))
		e.noTempFiles()
	})
}

// TestWriteCrash kills a real `codellm workspace` process at each step of an install and checks that the
// target is always either the complete old file or the complete new file (never partial or missing), and that
// a leftover staging file is hidden from list_files.
func TestWriteCrash(t *testing.T) {
	needRG(t)
	oldContent := strings.Repeat("old line\n", 20000)
	newContent := strings.Repeat("NEW LINE\n", 30000)
	for _, mode := range []string{"replace", "create", "edit"} {
		for _, step := range []string{"staged", "checked", "linked", "installed"} {
			if step == "linked" && mode != "create" {
				continue
			}
			t.Run(mode+"/"+step, func(t *testing.T) {
				e := newEnv(t, Options{AllowWrites: true})
				op, req := OpWriteFile, js(map[string]any{"path": "f.txt", "content": newContent})
				if mode != "create" {
					e.write("f.txt", oldContent)
				}
				if mode == "edit" {
					op, req = OpEditFile, js(map[string]any{"path": "f.txt", "oldText": oldContent, "newText": newContent})
				}
				cmd := exec.Command(os.Args[0], "--root", e.root, "--allow-writes", op)
				cmd.Env = append(os.Environ(), "CODELLM_WS_TEST_CLI=1", "CODELLM_WS_CRASH_AT="+step)
				cmd.Stdin = strings.NewReader(req)
				err := cmd.Run()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("the writer did not crash at %s: %v", step, err)
				}
				got, err := os.ReadFile(filepath.Join(e.root, "f.txt"))
				switch {
				case mode == "create" && errors.Is(err, os.ErrNotExist) && (step == "staged" || step == "checked"):
				case err != nil:
					t.Fatalf("target unreadable after crash at %s: %v", step, err)
				case string(got) == oldContent && mode != "create" && step != "installed":
				case string(got) == newContent && (step == "installed" || step == "linked"):
				default:
					t.Fatalf("after a crash at %s the target holds %d bytes: neither the old nor the new file", step, len(got))
				}
				for _, p := range paths(e.ok(OpListFiles, `{}`)) {
					if p != "f.txt" {
						t.Errorf("list_files shows %q after the crash", p)
					}
				}
			})
		}
	}
}

// TestSwapRace swaps a directory for a symlink to outside the root, over and over, while reads, writes and
// edits go through it. Whatever interleaving happens, nothing outside may be read or written.
func TestSwapRace(t *testing.T) {
	forEachResolver(t, func(t *testing.T) {
		e := newEnv(t, Options{AllowWrites: true})
		e.write("d/f.txt", "inside")
		os.WriteFile(filepath.Join(e.outside, "f.txt"), []byte("OUTSIDE"), 0o644)
		d := filepath.Join(e.root, "d")
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				os.Rename(d, d+".real")
				os.Symlink(e.outside, d)
				os.Remove(d)
				os.Rename(d+".real", d)
			}
		}()
		reads, okReads, plainEscapes := 0, 0, 0
		for i := 0; i < 1500; i++ {
			// Differential: a plain open of the same path does escape during the race.
			if b, _ := os.ReadFile(filepath.Join(d, "f.txt")); string(b) == "OUTSIDE" {
				plainEscapes++
			}
			out, err := e.ws.Do(context.Background(), OpReadFile, json.RawMessage(`{"path":"d/f.txt"}`))
			reads++
			if err == nil {
				var m map[string]any
				json.Unmarshal(out, &m)
				if m["content"] != "inside" {
					t.Fatalf("read returned %q", m["content"])
				}
				okReads++
			}
			e.ws.Do(context.Background(), OpWriteFile, json.RawMessage(`{"path":"d/new.txt","content":"pwned"}`))
			e.ws.Do(context.Background(), OpEditFile, json.RawMessage(`{"path":"d/f.txt","oldText":"inside","newText":"inside"}`))
		}
		stop.Store(true)
		wg.Wait()
		if b, _ := os.ReadFile(filepath.Join(e.outside, "f.txt")); !bytes.Equal(b, []byte("OUTSIDE")) {
			t.Fatal("edit reached outside the root")
		}
		if _, err := os.Stat(filepath.Join(e.outside, "new.txt")); err == nil {
			t.Fatal("write reached outside the root")
		}
		ents, _ := os.ReadDir(e.outside)
		if len(ents) != 2 {
			t.Fatalf("outside directory changed: %d entries", len(ents))
		}
		if plainEscapes == 0 {
			t.Fatal("the race never exposed the outside file to a plain open: the probe proves nothing")
		}
		t.Logf("%d reads, %d succeeded inside the root; %d plain opens escaped", reads, okReads, plainEscapes)
	})
}
