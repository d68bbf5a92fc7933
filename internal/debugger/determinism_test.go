package debugger_test

import (
	"testing"
	"time"

	"github.com/codellm/codellm/internal/wire"
)

// A body of two python blocks that print seed- and clock-dependent values.
var detBody = block("python", `import random, time, uuid
print(time.time(), random.random(), uuid.uuid4(), hex(id(object())))`) +
	block("python", `import os, sys, time
print(sys.stdin.read().strip(), time.time(), os.urandom(8).hex())`)

// stepAll steps a fresh session of detBody to its end and returns each step's stdout.
func stepAll(t *testing.T, s *dbgServer, meta map[string]any) []string {
	t.Helper()
	req := map[string]any{"body": detBody}
	if meta != nil {
		req["metadata"] = meta
	}
	r := s.do(t, "POST", "/debug/sessions", req)
	wantStatus(t, r, 201)
	if meta != nil && r.Header.Get(wire.DeterminismHeader) == "" {
		t.Fatalf("deterministic session created without %s", wire.DeterminismHeader)
	}
	id := r.obj(t)["id"].(string)
	defer s.do(t, "DELETE", sessionPath(id), nil)
	var outs []string
	for i := 0; i < 2; i++ {
		st := s.do(t, "POST", sessionPath(id, "step"), map[string]any{})
		wantStatus(t, st, 200)
		m := st.obj(t)
		if m["ok"] != true {
			t.Fatalf("step %d: %s", i, st.Body)
		}
		outs = append(outs, m["stdout"].(string))
	}
	return outs
}

// TestDeterministicStepping: the debugger steps a body deterministically when asked (metadata as on the
// chat route), so two sessions a second apart print the same bytes, run-block agrees with the session's
// step of the same block, and without the mode they differ.
func TestDeterministicStepping(t *testing.T) {
	s := startDebugger(t, envOpts{allowed: []string{"python"}})
	eng := newEngine(t, envOpts{allowed: []string{"python"}})
	if missing := eng.Config().Pipeline.Sandbox.DeterminismMissing(); missing != "" {
		t.Skipf("deterministic mode unavailable here: %s", missing)
	}
	meta := map[string]any{"deterministic": "true", "seed": "dbg", "now": "2024-05-06T07:08:09Z"}
	a := stepAll(t, s, meta)
	time.Sleep(1100 * time.Millisecond)
	b := stepAll(t, s, meta)
	if a[0] != b[0] || a[1] != b[1] {
		t.Fatalf("deterministic steps differ:\n%q\n%q", a, b)
	}
	t.Logf("steps: %q", a)
	one := s.do(t, "POST", "/debug/run-block", map[string]any{"body": detBody, "block": 1, "stdin": a[0], "metadata": meta})
	wantStatus(t, one, 200)
	if got := one.obj(t)["stdout"]; got != a[1] {
		t.Fatalf("run-block of block 1 = %q, the session's step = %q", got, a[1])
	}
	if off1, off2 := stepAll(t, s, nil), stepAll(t, s, nil); off1[0] == off2[0] {
		t.Fatalf("mode off: the same output twice: %q", off1[0])
	}
}
