package server_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/wire"
)

// Issue 21's bodies: each prints the wall clock, the monotonic clock (whole seconds: it starts at zero
// and runs in real time), random numbers, a UUID, hash-seed-dependent ordering (python), the hostname and
// an object address (or the heap/stack mappings), as the finish answer.
var detBodies = []string{
	block("python", `import json, os, random, socket, time, uuid
print(json.dumps({"answer": repr([time.time(), int(time.monotonic()), random.random(), str(uuid.uuid4()),
    os.urandom(8).hex(), list({"k%d" % i for i in range(8)}), hash("codellm"), socket.gethostname(), hex(id(object()))])}))`),
	block("node", `const crypto = require('crypto'), os = require('os'), fs = require('fs');
const maps = fs.readFileSync('/proc/self/maps', 'utf8').split('\n').filter(l => /\[(heap|stack)\]/.test(l)).map(l => l.split(' ')[0]);
console.log(JSON.stringify({answer: [Date.now(), new Date().toISOString(), Math.floor(performance.now() / 1000), Math.random(),
  crypto.randomUUID(), crypto.randomBytes(8).toString('hex'), os.hostname(), ...maps].join(' ')}));`),
	block("bash", `read up _ < /proc/uptime
maps=$(grep -E 'heap|stack' /proc/self/maps | cut -d' ' -f1 | tr '\n' ' ')
echo "{\"answer\":\"$(date +%s.%N) $EPOCHSECONDS $EPOCHREALTIME $(printf '%(%F %T)T' -1) ${up%%.*} $RANDOM $RANDOM $SRANDOM $SRANDOM $(od -An -tx1 -N16 /dev/urandom | tr -d ' \n') $(hostname) $maps pid $$ $(/usr/bin/python3 -c 'import os; print(os.getpid(), os.getppid())')\"}"`),
}

// detRun posts the three bodies with the given metadata and returns their tool calls (and the last
// response's determinism header).
func detRun(t *testing.T, ts *testServer, meta map[string]any) ([][]call, string) {
	t.Helper()
	var all [][]call
	var hdr string
	for _, b := range detBodies {
		req := chat(b)
		if meta != nil {
			req["metadata"] = meta
		}
		status, h, body := ts.post(t, "/v1/chat/completions", req)
		_, calls := decodeCompletion(t, status, body)
		all = append(all, calls)
		hdr = h.Get(wire.DeterminismHeader)
	}
	return all, hdr
}

func TestDeterministicToolCalls(t *testing.T) {
	ts := startServer(t, options{allowed: []string{"python", "node", "bash"}})
	if missing := ts.sb.DeterminismMissing(); missing != "" {
		t.Skipf("deterministic mode unavailable here: %s", missing)
	}
	meta := map[string]any{"deterministic": "true", "seed": "s1", "now": "2024-01-02T03:04:05Z"}
	first, hdr := detRun(t, ts, meta)
	time.Sleep(1100 * time.Millisecond)
	second, _ := detRun(t, ts, meta)
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("same seed and clock, different tool calls:\n%v\n%v", first, second)
	}
	t.Logf("tool calls: %v", first)
	if hdr != `seed="s1"; now=2024-01-02T03:04:05Z` {
		t.Errorf("%s = %q", wire.DeterminismHeader, hdr)
	}
	if !strings.Contains(first[0][0].Args["answer"].(string), "1704164645.") {
		t.Errorf("python's wall clock is not metadata.now: %v", first[0])
	}
	// bash's own clock ($EPOCHSECONDS, printf %(…)T) is libfaketime's too (the block's /etc/faketimerc).
	if !strings.Contains(first[2][0].Args["answer"].(string), " 1704164645 1704164645.") {
		t.Errorf("bash's $EPOCHSECONDS/$EPOCHREALTIME are not metadata.now: %v", first[2])
	}
	// 32 is hook.ProgramPID: the init pins the program's PID in deterministic mode.
	if !strings.Contains(first[2][0].Args["answer"].(string), " pid 32 ") {
		t.Errorf("bash's $$ is not the pinned program PID 32: %v", first[2])
	}
	if other, _ := detRun(t, ts, map[string]any{"deterministic": "true", "seed": "s2", "now": "2024-01-02T03:04:05Z"}); reflect.DeepEqual(other, first) {
		t.Error("another seed gave the same tool calls")
	}
	if later, _ := detRun(t, ts, map[string]any{"deterministic": "true", "seed": "s1", "now": "1704168245"}); reflect.DeepEqual(later, first) {
		t.Error("another clock gave the same tool calls")
	}
	off1, offHdr := detRun(t, ts, nil)
	off2, _ := detRun(t, ts, nil)
	for i := range off1 {
		if reflect.DeepEqual(off1[i], off2[i]) {
			t.Errorf("mode off: body %d answered the same twice: %v", i, off1[i])
		}
	}
	if offHdr != "" {
		t.Errorf("mode off, yet %s = %q", wire.DeterminismHeader, offHdr)
	}
}

// TestDeterministicMetadataErrors: a seed without the mode, or a malformed field, is a precise 400.
func TestDeterministicMetadataErrors(t *testing.T) {
	ts := startServer(t, options{allowed: []string{"bash"}})
	for _, c := range []struct {
		meta     map[string]any
		fragment string
	}{
		{map[string]any{"seed": "x"}, "need deterministic mode"},
		{map[string]any{"deterministic": "yes"}, `metadata.deterministic`},
		{map[string]any{"deterministic": "true", "now": "yesterday"}, `metadata.now`},
	} {
		req := chat(block("bash", `echo '{"answer":"x"}'`))
		req["metadata"] = c.meta
		status, _, body := ts.post(t, "/v1/chat/completions", req)
		wantError(t, status, body, http.StatusBadRequest, "invalid_metadata", c.fragment)
	}
}
