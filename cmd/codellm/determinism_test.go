package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/testhelp"
)

// determinismReady skips (or, with CODELLM_REQUIRE_SANDBOX=1, fails) when base's /readyz says
// deterministic mode cannot run here.
func determinismReady(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rd struct {
		Mechanisms struct {
			Determinism struct {
				Supported bool
				Missing   string
			}
		}
	}
	json.NewDecoder(resp.Body).Decode(&rd)
	if d := rd.Mechanisms.Determinism; !d.Supported {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("deterministic mode unavailable (%s) and CODELLM_REQUIRE_SANDBOX=1", d.Missing)
		}
		t.Skipf("deterministic mode unavailable here: %s", d.Missing)
	}
}

// postRaw posts body (JSON) with the extra headers and returns the status, headers and body.
func postRaw(t *testing.T, url string, body any, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return testhelp.PostJSON(t, url, b, hdr)
}

// Runner bodies printing the wall clock, random numbers, a UUID, seeded bytes, hash order and an
// address (python), and bash's own clock, $RANDOM, $SRANDOM and date(1).
var runnerDetBodies = map[string]string{
	"python": `import os, random, time, uuid
print(time.time(), random.random(), uuid.uuid4(), os.urandom(8).hex(), list({"k%d" % i for i in range(6)}), hex(id(object())))`,
	"bash": `echo "$EPOCHSECONDS $EPOCHREALTIME $RANDOM $SRANDOM $(date -u +%s.%N) $(od -An -tx1 -N8 /dev/urandom | tr -d ' ')"`,
}

// detExecute runs every runner body with metadata (nil: none) in session ("" = one-off) and returns the
// stdouts joined, and the last reply's determinism header.
func detExecute(t *testing.T, base, session string, meta map[string]any) (string, string) {
	t.Helper()
	var out strings.Builder
	hdr := ""
	for _, lang := range []string{"python", "bash"} {
		req := map[string]any{"language": lang, "version": "*", "files": []map[string]string{{"content": runnerDetBodies[lang]}}}
		if meta != nil {
			req["metadata"] = meta
		}
		h := map[string]string{}
		if session != "" {
			h["X-Runtime-Session-Id"] = session
		}
		status, rh, body := postRaw(t, base+"/api/v2/execute", req, h)
		var r struct {
			Run           pistonRun
			Deterministic *struct{ Seed, Now string }
		}
		if status != 200 || json.Unmarshal(body, &r) != nil || r.Run.Code == nil || *r.Run.Code != 0 {
			t.Fatalf("%s: status %d: %s", lang, status, body)
		}
		if (r.Deterministic != nil) != (rh.Get("X-Codellm-Deterministic") != "") {
			t.Fatalf("%s: reply field %+v disagrees with the header %q", lang, r.Deterministic, rh.Get("X-Codellm-Deterministic"))
		}
		out.WriteString(lang + ": " + r.Run.Stdout)
		hdr = rh.Get("X-Codellm-Deterministic")
	}
	return out.String(), hdr
}

// Issue 21 on the runner API, through the real binary: metadata.deterministic/seed/now on
// /api/v2/execute (one-off and session executes) give byte-identical stdout seconds apart, another seed
// or clock changes it, without the mode it differs run to run; the seed is part of an Idempotency-Key's
// request identity; malformed fields are 400s that run nothing.
func TestDeterministicRunnerEndToEnd(t *testing.T) {
	base := startServe(t)
	determinismReady(t, base)
	meta := map[string]any{"deterministic": "true", "seed": "r1", "now": "2024-01-02T03:04:05Z"}
	first, hdr := detExecute(t, base, "", meta)
	time.Sleep(1100 * time.Millisecond)
	if again, _ := detExecute(t, base, "", meta); again != first {
		t.Fatalf("same seed and clock, different output:\n%s---\n%s", first, again)
	}
	t.Logf("deterministic runner output:\n%s", first)
	if hdr != `seed="r1"; now=2024-01-02T03:04:05Z` || !strings.Contains(first, "python: 1704164645.") ||
		!strings.Contains(first, "bash: 1704164645 1704164645.") {
		t.Fatalf("header %q / output does not follow metadata.now:\n%s", hdr, first)
	}
	if inSession, _ := detExecute(t, base, "det-session", meta); inSession != first {
		t.Errorf("a session execute differs from the one-off one:\n%s---\n%s", inSession, first)
	}
	if other, _ := detExecute(t, base, "", map[string]any{"deterministic": true, "seed": "r2", "now": "2024-01-02T03:04:05Z"}); other == first {
		t.Error("another seed gave the same output")
	}
	if later, _ := detExecute(t, base, "", map[string]any{"deterministic": "true", "seed": "r1", "now": 1704168245}); later == first {
		t.Error("another clock gave the same output")
	}
	off1, offHdr := detExecute(t, base, "", nil)
	if off2, _ := detExecute(t, base, "", nil); off1 == off2 || offHdr != "" {
		t.Errorf("mode off: same output twice (%v) or a determinism header %q", off1 == off2, offHdr)
	}
	runnerDetRefusals(t, base)
}

// runnerDetRefusals: malformed or contradictory fields are 400s naming the field; an Idempotency-Key
// reused with another seed is refused, with the same seed replayed with the header.
func runnerDetRefusals(t *testing.T, base string) {
	t.Helper()
	for meta, want := range map[string]string{
		`{"seed":"x"}`:                           "need deterministic mode",
		`{"deterministic":"yes"}`:                `metadata.deterministic`,
		`{"deterministic":"true","now":"soon"}`:  `metadata.now`,
		`{"deterministic":"true","seed":[1]}`:    `metadata.seed`,
		`{"deterministic":"false","now":"1000"}`: "need deterministic mode",
	} {
		var m map[string]any
		json.Unmarshal([]byte(meta), &m)
		req := map[string]any{"language": "python", "version": "*", "files": []map[string]string{{"content": "print(1)"}}, "metadata": m}
		if status, _, body := postRaw(t, base+"/api/v2/execute", req, nil); status != 400 || !strings.Contains(string(body), want) {
			t.Errorf("metadata %s: %d %s, want 400 naming %q", meta, status, body, want)
		}
	}
	key := map[string]string{"Idempotency-Key": "det-key-1"}
	req := func(seed string) map[string]any {
		return map[string]any{"language": "python", "version": "*", "files": []map[string]string{{"content": "import random; print(random.random())"}},
			"metadata": map[string]any{"deterministic": "true", "seed": seed}}
	}
	s1, _, b1 := postRaw(t, base+"/api/v2/execute", req("k1"), key)
	s2, h2, b2 := postRaw(t, base+"/api/v2/execute", req("k1"), key)
	if s1 != 200 || s2 != 200 || !bytes.Equal(b1, b2) || h2.Get("Idempotent-Replayed") != "true" || h2.Get("X-Codellm-Deterministic") == "" {
		t.Errorf("replay: %d %d replayed=%q det=%q", s1, s2, h2.Get("Idempotent-Replayed"), h2.Get("X-Codellm-Deterministic"))
	}
	if s3, _, b3 := postRaw(t, base+"/api/v2/execute", req("k2"), key); s3 != 400 || !strings.Contains(string(b3), "idempotency_key_reused") {
		t.Errorf("same key, another seed: %d %s, want 400 idempotency_key_reused", s3, b3)
	}
}
