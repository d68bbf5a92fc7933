package worker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// detPython prints the wall clock, random numbers, a UUID, seeded bytes and hash order.
const detPython = `import os, random, time, uuid
print(time.time(), random.random(), uuid.uuid4(), os.urandom(8).hex(), list({"k%d" % i for i in range(6)}))`

// detBash prints bash's own clock and $RANDOM, date(1) and seeded bytes.
const detBash = `echo "$EPOCHSECONDS $RANDOM $SRANDOM $(date -u +%s) $(od -An -tx1 -N8 /dev/urandom | tr -d ' ')"`

// execDet posts /v1/exec with metadata (nil: none) and returns the reply.
func (h *hubProc) execDet(t *testing.T, lang, code string, meta map[string]any, hdr map[string]string) reply {
	t.Helper()
	req := map[string]any{"lang": lang, "code": code}
	if meta != nil {
		req["metadata"] = meta
	}
	b, _ := json.Marshal(req)
	return h.post(t, context.Background(), "/v1/exec", string(b), hdr)
}

// detOutputs runs both bodies through the hub and returns their stdouts joined and the last
// determinism header.
func (h *hubProc) detOutputs(t *testing.T, meta map[string]any) (string, string) {
	t.Helper()
	var out strings.Builder
	var hdr string
	for _, c := range [][2]string{{"py", detPython}, {"bash", detBash}} {
		rep := h.execDet(t, c[0], c[1], meta, nil)
		m := decodeExec(t, rep)
		if rep.status != 200 || m["stderr"] != "" {
			t.Fatalf("exec %s: %d %s", c[0], rep.status, rep.body)
		}
		out.WriteString(c[0] + ": " + m["stdout"].(string))
		hdr = rep.header.Get("X-Codellm-Deterministic")
	}
	return out.String(), hdr
}

// Issue 21 across the bridge, real hub and worker binaries: metadata.deterministic/seed/now on the hub's
// /v1/exec and chat route reach the worker and run deterministically (byte-identical seconds apart,
// another seed differs, mode off differs); /v1/exec's reply carries the header; malformed fields are the
// hub's 400 before any dispatch; an Idempotency-Key reused with another seed is refused.
func TestE2EDeterministic(t *testing.T) {
	if sandboxFlag(t) != "native" {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatal("deterministic mode needs the native sandbox, and CODELLM_REQUIRE_SANDBOX=1")
		}
		t.Skip("deterministic mode needs the native sandbox")
	}
	if sb, _ := testSandbox(); sb.DeterminismMissing() != "" {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("deterministic mode unavailable (%s) and CODELLM_REQUIRE_SANDBOX=1", sb.DeterminismMissing())
		}
		t.Skipf("deterministic mode unavailable here: %s", sb.DeterminismMissing())
	}
	h := startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
	w := pairProc(t, h, "e2e:det")
	w.run(t)
	h.waitReady(t, "e2e:det")

	meta := map[string]any{"deterministic": "true", "seed": "h1", "now": "2024-01-02T03:04:05Z"}
	first, hdr := h.detOutputs(t, meta)
	time.Sleep(1100 * time.Millisecond)
	if again, _ := h.detOutputs(t, meta); again != first {
		t.Fatalf("same seed and clock through the hub, different output:\n%s---\n%s", first, again)
	}
	t.Logf("deterministic output through the hub:\n%s", first)
	if hdr != `seed="h1"; now=2024-01-02T03:04:05Z` || !strings.Contains(first, "py: 1704164645.") || !strings.Contains(first, "bash: 1704164645 ") {
		t.Fatalf("header %q / output does not follow metadata.now:\n%s", hdr, first)
	}
	if other, _ := h.detOutputs(t, map[string]any{"deterministic": "true", "seed": "h2", "now": "2024-01-02T03:04:05Z"}); other == first {
		t.Error("another seed gave the same output")
	}
	if off1, offHdr := h.detOutputs(t, nil); offHdr != "" {
		t.Errorf("mode off, yet header %q", offHdr)
	} else if off2, _ := h.detOutputs(t, nil); off1 == off2 {
		t.Errorf("mode off: the same output twice:\n%s", off1)
	}
	hubDetChat(t, h)
	hubDetRefusals(t, h)
}

// hubDetChat: a chat through the hub carrying the metadata runs deterministically on the worker.
func hubDetChat(t *testing.T, h *hubProc) {
	t.Helper()
	chat := func(seed string) string {
		body, _ := json.Marshal(map[string]any{"model": "codellm",
			"metadata": map[string]any{"deterministic": "true", "seed": seed, "now": "2024-01-02T03:04:05Z"},
			"messages": []map[string]string{{"role": "user", "content": "```python\nimport json, random, time, uuid\n" +
				"print(json.dumps({'answer': '%r %r %s' % (time.time(), random.random(), uuid.uuid4())}))\n```"}}})
		rep := h.post(t, context.Background(), "/v1/chat/completions", string(body), nil)
		var c struct {
			Choices []struct {
				Message struct {
					ToolCalls []struct{ Function struct{ Arguments string } } `json:"tool_calls"`
				}
			}
		}
		if rep.status != 200 || json.Unmarshal(rep.body, &c) != nil || len(c.Choices) == 0 || len(c.Choices[0].Message.ToolCalls) == 0 {
			t.Fatalf("chat: %d %s", rep.status, rep.body)
		}
		return c.Choices[0].Message.ToolCalls[0].Function.Arguments
	}
	a, b := chat("c1"), chat("c1")
	if a != b || !strings.Contains(a, "1704164645.") {
		t.Errorf("chat through the hub: %s then %s, want the same answer at metadata.now", a, b)
	}
	if c := chat("c2"); c == a {
		t.Errorf("chat through the hub: another seed gave the same answer %s", c)
	}
}

// hubDetRefusals: malformed metadata is the hub's 400 (nothing dispatched); an Idempotency-Key is bound
// to its seed.
func hubDetRefusals(t *testing.T, h *hubProc) {
	t.Helper()
	for _, meta := range []map[string]any{{"deterministic": "maybe"}, {"deterministic": "true", "now": "later"}} {
		if rep := h.execDet(t, "py", "print(1)", meta, nil); rep.status != 400 || !strings.Contains(string(rep.body), "metadata.") {
			t.Errorf("metadata %v: %d %s, want 400 naming the field", meta, rep.status, rep.body)
		}
	}
	key := map[string]string{"Idempotency-Key": "det-hub-key"}
	code := "import random; print(random.random())"
	r1 := h.execDet(t, "py", code, map[string]any{"deterministic": "true", "seed": "k1"}, key)
	r2 := h.execDet(t, "py", code, map[string]any{"deterministic": "true", "seed": "k1"}, key)
	if r1.status != 200 || string(r1.body) != string(r2.body) || r2.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %s / %s replayed=%q", r1.status, r1.body, r2.body, r2.header.Get("Idempotent-Replayed"))
	}
	if r3 := h.execDet(t, "py", code, map[string]any{"deterministic": "true", "seed": "k2"}, key); r3.status != 400 ||
		!strings.Contains(string(r3.body), "idempotency_key_reused") {
		t.Errorf("same key, another seed: %d %s, want 400 idempotency_key_reused", r3.status, r3.body)
	}
}
