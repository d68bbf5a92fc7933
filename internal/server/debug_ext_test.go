package server_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/server"
)

// G26: the x_codellm_debug extension (openai-contract §13) and the taps behind it (§5.4).

func debugChat(body string) map[string]any {
	req := chat(body)
	req["x_codellm_debug"] = true
	return req
}

func withDebugExtension(c *server.Config) { c.DebugExtension = true }

// debugBlocks returns the per-block objects of a reply (completion or error envelope).
func debugBlocks(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var r struct {
		Debug *struct {
			Blocks []map[string]any `json:"blocks"`
		} `json:"x_codellm_debug"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("reply is not JSON: %v: %s", err, body)
	}
	if r.Debug == nil {
		t.Fatalf("reply has no x_codellm_debug: %s", body)
	}
	return r.Debug.Blocks
}

// exact returns a byte field's exact bytes (the _base64 sibling when present).
func exact(t *testing.T, m map[string]any, field string) []byte {
	t.Helper()
	if b64, ok := m[field+"_base64"].(string); ok {
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s, ok := m[field].(string)
	if !ok {
		t.Fatalf("%s missing in %v", field, m)
	}
	return []byte(s)
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// readAll is a Python block that reads its whole stdin, reports the length and SHA-256 of what it read on
// stderr (the witness of what the downstream actually read), and passes the bytes on upper-cased.
const readAll = `import hashlib, sys
data = sys.stdin.buffer.read()
sys.stderr.write("%d %s" % (len(data), hashlib.sha256(data).hexdigest()))
sys.stdout.buffer.write(data.upper())`

// reportAll is the last block: it reads everything and answers with what it read.
const reportAll = `import hashlib, json, sys
data = sys.stdin.buffer.read()
print(json.dumps({"answer": "%d %s" % (len(data), hashlib.sha256(data).hexdigest())}))`

func TestG26IgnoredWithoutFlag(t *testing.T) {
	ts := startServer(t, options{})
	status, _, body := ts.post(t, "/v1/chat/completions", debugChat(block("bash", `echo '{"answer":"x"}'`)))
	c, calls := decodeCompletion(t, status, body)
	if c.Debug != nil || bytes.Contains(body, []byte("x_codellm_debug")) {
		t.Fatalf("debug object without --debug-extension: %s", body)
	}
	if len(calls) != 1 || calls[0].Args["answer"] != "x" {
		t.Fatalf("calls %v", calls)
	}
	// With the flag but without the request field: no object either.
	ts2 := startServer(t, options{cfg: withDebugExtension})
	status, _, body = ts2.post(t, "/v1/chat/completions", chat(block("bash", `echo '{"answer":"x"}'`)))
	if c, _ := decodeCompletion(t, status, body); c.Debug != nil {
		t.Fatalf("debug object without x_codellm_debug: %s", body)
	}
}

func TestG26TwoAndThreeBlocks(t *testing.T) {
	ts := startServer(t, options{cfg: withDebugExtension})
	t.Run("two blocks", func(t *testing.T) {
		body := block("bash", `printf 'a\nb\n'; echo note >&2`) + block("python", reportAll)
		status, _, raw := ts.post(t, "/v1/chat/completions", debugChat(body))
		_, calls := decodeCompletion(t, status, raw)
		blocks := debugBlocks(t, raw)
		if len(blocks) != 2 {
			t.Fatalf("%d blocks", len(blocks))
		}
		b0, b1 := blocks[0], blocks[1]
		for i, b := range blocks {
			if b["index"] != float64(i) || b["outcome"] != "ok" || b["exit_code"] != 0.0 || b["signal"] != nil {
				t.Fatalf("block %d: %v", i, b)
			}
			if d, ok := b["duration_ms"].(float64); !ok || d < 0 {
				t.Fatalf("duration_ms: %v", b)
			}
			if m, ok := b["max_rss_bytes"].(float64); !ok || m <= 0 {
				t.Fatalf("max_rss_bytes: %v", b)
			}
		}
		if b0["lang"] != "bash" || b0["program"] != "bash" || b1["lang"] != "python" || b1["program"] != "python" {
			t.Fatalf("labels: %v %v", b0, b1)
		}
		if b0["pipe_buffer"] != "a\nb\n" || b0["stdout"] != "a\nb\n" || b0["stderr"] != "note\n" || b1["pipe_buffer"] != "" {
			t.Fatalf("taps: %v / %v", b0, b1)
		}
		// What the downstream read is exactly the tap.
		if want := "4 " + digest([]byte("a\nb\n")); calls[0].Args["answer"] != want {
			t.Fatalf("downstream read %v, tap says %q", calls[0].Args["answer"], want)
		}
		if !strings.HasPrefix(b1["stdout"].(string), `{"answer": "4 `) {
			t.Fatalf("last stdout %q", b1["stdout"])
		}
	})
	t.Run("three blocks, every edge equals what the downstream read", func(t *testing.T) {
		// 360 KB crosses each edge: several pipe buffers, so the taps see a real stream.
		body := block("python", `import sys
sys.stdout.write("".join("line %06d\n" % i for i in range(30000)))`) + block("python", readAll) + block("python", reportAll)
		status, _, raw := ts.post(t, "/v1/chat/completions", debugChat(body))
		_, calls := decodeCompletion(t, status, raw)
		blocks := debugBlocks(t, raw)
		if len(blocks) != 3 {
			t.Fatalf("%d blocks", len(blocks))
		}
		tap1, tap2 := exact(t, blocks[0], "pipe_buffer"), exact(t, blocks[1], "pipe_buffer")
		if len(tap1) != 360000 || !bytes.Equal(tap1, exact(t, blocks[0], "stdout")) {
			t.Fatalf("tap 1: %d bytes", len(tap1))
		}
		// Block 2 reported (on stderr) the length and hash of what it read; block 3 in its answer.
		if got, want := string(exact(t, blocks[1], "stderr")), "360000 "+digest(tap1); got != want {
			t.Fatalf("edge 1: downstream read %q, tap %q", got, want)
		}
		if got, want := calls[0].Args["answer"], "360000 "+digest(tap2); got != want {
			t.Fatalf("edge 2: downstream read %q, tap %q", got, want)
		}
		if !bytes.Equal(tap2, bytes.ToUpper(tap1)) || blocks[2]["pipe_buffer"] != "" {
			t.Fatal("tap 2 is not block 2's output")
		}
		if _, ok := blocks[0]["pipe_buffer_truncated"]; ok {
			t.Fatal("truncation flag under the cap")
		}
	})
}

// TestG26EarlyExit: a downstream that stops reading early. The tap holds what was delivered into its stdin:
// it starts with exactly what the downstream read, is a prefix of what the upstream wrote, and exceeds
// what was read by at most one pipe buffer (§5.4). The upstream is excused.
func TestG26EarlyExit(t *testing.T) {
	ts := startServer(t, options{cfg: withDebugExtension})
	// The upstream restores SIGPIPE, so that losing its reader ends it as it ends yes (python ignores
	// SIGPIPE by default and would fail the run with BrokenPipeError: only SIGPIPE excuses an upstream).
	const upstream = `import signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
sys.stdout.buffer.write(bytes(i % 251 for i in range(2000000)))`
	all := make([]byte, 2000000)
	for i := range all {
		all[i] = byte(i % 251)
	}
	for _, tc := range []struct {
		name, downstream string
	}{
		// Reads exactly ten bytes with read(2) and prints them in hex.
		{"python reads 10 bytes", `import os, sys
b = b""
while len(b) < 10:
    c = os.read(0, 10 - len(b))
    if not c:
        break
    b += c
sys.stdout.write(b.hex())`},
		{"head -c 10", `head -c 10 | od -An -tx1 | tr -d ' \n'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lang := "python"
			if strings.HasPrefix(tc.downstream, "head") {
				lang = "bash"
			}
			body := block("python", upstream) + block(lang, tc.downstream) +
				block("bash", `printf '{"answer":"%s"}' "$(cat)"`)
			status, _, raw := ts.post(t, "/v1/chat/completions", debugChat(body))
			_, calls := decodeCompletion(t, status, raw)
			blocks := debugBlocks(t, raw)
			read, err := hex.DecodeString(calls[0].Args["answer"].(string))
			if err != nil || !bytes.Equal(read, all[:10]) {
				t.Fatalf("downstream read %q (%v)", calls[0].Args["answer"], err)
			}
			tap := exact(t, blocks[0], "pipe_buffer")
			if !bytes.HasPrefix(tap, read) || !bytes.HasPrefix(all, tap) {
				t.Fatalf("tap of %d bytes is not between what was read and what was written", len(tap))
			}
			// head reads a whole chunk before stopping, so allow its read size on top of one pipe buffer.
			if extra := len(tap) - len(read); extra > 64<<10+128<<10 {
				t.Fatalf("tap holds %d bytes beyond what the downstream read", extra)
			}
			if blocks[0]["outcome"] != "excused" || blocks[1]["outcome"] != "ok" {
				t.Fatalf("outcomes %v %v", blocks[0]["outcome"], blocks[1]["outcome"])
			}
			if blocks[1]["pipe_buffer"] != calls[0].Args["answer"] {
				t.Fatalf("edge 2 tap %q", blocks[1]["pipe_buffer"])
			}
		})
	}
}

// TestG26TapOverCap: a tap stops at --max-output-bytes and is marked truncated; the flow is unaffected.
func TestG26TapOverCap(t *testing.T) {
	ts := startServer(t, options{cfg: withDebugExtension, ecfg: func(c *engine.Config) { c.Pipeline.MaxOutputBytes = 1000 }})
	body := block("bash", `head -c 5000 /dev/zero | tr '\0' x`) + block("bash", `printf '{"answer":"%s"}' "$(wc -c)"`)
	status, _, raw := ts.post(t, "/v1/chat/completions", debugChat(body))
	_, calls := decodeCompletion(t, status, raw)
	if calls[0].Args["answer"] != "5000" {
		t.Fatalf("downstream read %v bytes, want 5000 (the cap must not affect the flow)", calls[0].Args["answer"])
	}
	b0 := debugBlocks(t, raw)[0]
	if b0["pipe_buffer"] != strings.Repeat("x", 1000) || b0["pipe_buffer_truncated"] != true {
		t.Fatalf("tap: %d bytes, truncated %v", len(b0["pipe_buffer"].(string)), b0["pipe_buffer_truncated"])
	}
}

// TestG26BytesAndErrors: non-UTF-8 output gets _base64 siblings; a failed run's 422 carries the object.
func TestG26BytesAndErrors(t *testing.T) {
	ts := startServer(t, options{cfg: withDebugExtension})
	body := block("bash", `printf 'a\377\376'; printf 'e\377' >&2`) + block("bash", `od -An -tx1 >&2; echo '{"answer":"ok"}'`)
	status, _, raw := ts.post(t, "/v1/chat/completions", debugChat(body))
	decodeCompletion(t, status, raw)
	b0 := debugBlocks(t, raw)[0]
	if b0["pipe_buffer"] != "a\uFFFD\uFFFD" || b0["pipe_buffer_base64"] != base64.StdEncoding.EncodeToString([]byte("a\xff\xfe")) ||
		b0["stdout_base64"] != b0["pipe_buffer_base64"] || b0["stderr_base64"] != base64.StdEncoding.EncodeToString([]byte("e\xff")) {
		t.Fatalf("byte fields: %v", b0)
	}
	if b1 := debugBlocks(t, raw)[1]; strings.TrimSpace(b1["stderr"].(string)) != "61 ff fe" {
		t.Fatalf("downstream read %q", b1["stderr"])
	}

	// Middle block fails: 422 nonzero_exit with the per-block objects beside the envelope.
	body = block("bash", "echo one") + block("bash", "cat >/dev/null; echo boom >&2; exit 1") + block("bash", "cat")
	status, _, raw = ts.post(t, "/v1/chat/completions", debugChat(body))
	wantError(t, status, raw, http.StatusUnprocessableEntity, "nonzero_exit", "block 2/3")
	blocks := debugBlocks(t, raw)
	if len(blocks) != 3 || blocks[1]["outcome"] != "failed" || blocks[1]["exit_code"] != 1.0 || blocks[1]["stderr"] != "boom\n" ||
		blocks[0]["pipe_buffer"] != "one\n" {
		t.Fatalf("failed run's debug object: %v", blocks)
	}
	// bad_output also carries it.
	status, _, raw = ts.post(t, "/v1/chat/completions", debugChat(block("bash", "echo not json")))
	wantError(t, status, raw, http.StatusUnprocessableEntity, "bad_output", "")
	if b := debugBlocks(t, raw); b[0]["stdout"] != "not json\n" {
		t.Fatalf("bad_output debug: %v", b)
	}
}

// TestG26Stream: with stream true the object rides on the finish_reason chunk.
func TestG26Stream(t *testing.T) {
	ts := startServer(t, options{cfg: withDebugExtension})
	req := debugChat(block("bash", `printf 'x\n'`) + block("bash", `read v; echo "{\"answer\":\"$v\"}"`))
	req["stream"] = true
	status, _, raw := ts.post(t, "/v1/chat/completions", req)
	if status != 200 {
		t.Fatalf("status %d: %s", status, raw)
	}
	found := false
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Debug json.RawMessage `json:"x_codellm_debug"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		finishing := len(chunk.Choices) == 1 && chunk.Choices[0].FinishReason != nil
		if (chunk.Debug != nil) != finishing {
			t.Fatalf("debug object on the wrong chunk: %s", data)
		}
		if finishing {
			found = true
			blocks := debugBlocks(t, []byte(data))
			if blocks[0]["pipe_buffer"] != "x\n" {
				t.Fatalf("stream tap %v", blocks[0])
			}
		}
	}
	if !found {
		t.Fatalf("no finish_reason chunk: %s", raw)
	}
}

// TestDebugSurfaceNotOnMainListener: nothing of the step debugger (§14) answers on the main listener, even
// with the debug extension on.
func TestDebugSurfaceNotOnMainListener(t *testing.T) {
	ts := startServer(t, options{cfg: withDebugExtension})
	for _, path := range []string{"/debug/blocks?body=x", "/debug/sessions", "/"} {
		status, _, body := ts.get(t, path)
		wantError(t, status, body, http.StatusNotFound, "not_found", "")
	}
	for _, path := range []string{"/debug/blocks", "/debug/run-block", "/debug/sessions"} {
		status, _, body := ts.post(t, path, map[string]any{"body": block("bash", "echo hi"), "block": 0})
		wantError(t, status, body, http.StatusNotFound, "not_found", "")
	}
}
