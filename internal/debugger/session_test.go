package debugger_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/markdown"
)

// threeBlocks is G28's body: data crosses two edges, and the last block turns its stdin into the output
// contract, so an edit before step 3 is visible in the final answer.
var threeBlocks = block("bash", `printf 'abc\ndef\n'`) +
	block("bash", `tr a-z A-Z`) +
	block("python", "import json, sys\n"+
		"data = sys.stdin.read()\n"+
		"bag = json.load(open(__import__('os').environ['FLEET_INPUT']))\n"+
		"print(json.dumps({'changes': [{'path': 'out.md', 'content': data}], 'answer': bag.get('tag', '') + ':' + str(len(data))}))")

func sessionPath(id string, action ...string) string {
	p := "/debug/sessions/" + id
	if len(action) > 0 {
		p += "/" + action[0]
	}
	return p
}

func TestSessionG28(t *testing.T) {
	s := startDebugger(t, envOpts{})
	r := s.do(t, "POST", "/debug/sessions", map[string]any{"body": threeBlocks, "input": map[string]any{"tag": "T"}})
	wantStatus(t, r, 201)
	st := r.obj(t)
	id, _ := st["id"].(string)
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("id %q is not 128 bits of hex", id)
	}
	if st["next"] != 0.0 || st["done"] != false || st["buffer"] != "" || len(st["blocks"].([]any)) != 3 {
		t.Fatalf("created: %s", r.Body)
	}
	if b := st["blocks"].([]any)[2].(map[string]any); b["program"] != "python" || b["allowed"] != true {
		t.Fatalf("block listing: %v", b)
	}

	step := func(want string) map[string]any {
		t.Helper()
		r := s.do(t, "POST", sessionPath(id, "step"), map[string]any{})
		wantStatus(t, r, 200)
		m := r.obj(t)
		if m["ok"] != true || m["stdin_source"] != "buffer" || (want != "" && m["stdout"] != want) || m["buffer"] != m["stdout"] {
			t.Fatalf("step: %s", r.Body)
		}
		return m
	}
	m := step("abc\ndef\n")
	if m["block"] != 0.0 || m["blocks_total"] != 3.0 || m["next"] != 1.0 || m["done"] != false || m["final"] != nil {
		t.Fatalf("step 1: %v", m)
	}
	m = step("ABC\nDEF\n")
	if m["next"] != 2.0 {
		t.Fatalf("step 2: %v", m)
	}

	// GET reports history and an expiry in the future.
	r = s.do(t, "GET", sessionPath(id), nil)
	wantStatus(t, r, 200)
	st = r.obj(t)
	steps := st["steps"].([]any)
	if len(steps) != 2 || steps[1].(map[string]any)["block"] != 1.0 || steps[1].(map[string]any)["ok"] != true ||
		steps[1].(map[string]any)["exit_code"] != 0.0 || st["buffer"] != "ABC\nDEF\n" {
		t.Fatalf("state: %s", r.Body)
	}
	exp, err := time.Parse(time.RFC3339, st["expires_at"].(string))
	if err != nil || !exp.After(time.Now()) {
		t.Fatalf("expires_at %v: %v", st["expires_at"], err)
	}

	// Edit the buffer before step 3: the edited bytes reach block 3.
	r = s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer": "edited\n"})
	wantStatus(t, r, 200)
	if r.obj(t)["buffer"] != "edited\n" {
		t.Fatalf("PUT: %s", r.Body)
	}
	m = step("")
	if m["done"] != true || m["next"] != 3.0 {
		t.Fatalf("step 3: %v", m)
	}
	final := m["final"].(map[string]any)
	calls := final["tool_calls"].([]any)
	if final["ok"] != true || len(calls) != 2 {
		t.Fatalf("final: %v", final)
	}
	write := calls[0].(map[string]any)
	if write["id"] != "call_0" || write["type"] != "function" {
		t.Fatalf("call 0: %v", write)
	}
	var args map[string]string
	fn := write["function"].(map[string]any)
	if err := json.Unmarshal([]byte(fn["arguments"].(string)), &args); err != nil || fn["name"] != "write_note" ||
		args["content"] != "edited\n" {
		t.Fatalf("write_note: %v %v", fn, err)
	}
	fin := calls[1].(map[string]any)["function"].(map[string]any)
	if fin["name"] != "finish" || fin["arguments"] != `{"answer":"T:7"}` {
		t.Fatalf("finish: %v", fin)
	}
	wantError(t, s.do(t, "POST", sessionPath(id, "step"), map[string]any{}), 409, "session_done", "")
	if st := s.do(t, "GET", sessionPath(id), nil).obj(t); st["done"] != true || st["final"] == nil {
		t.Fatalf("done state: %v", st)
	}

	// Reset: back to block 1 with an empty buffer and no history; stepping works again.
	r = s.do(t, "POST", sessionPath(id, "reset"), nil)
	wantStatus(t, r, 200)
	st = r.obj(t)
	if st["next"] != 0.0 || st["done"] != false || st["buffer"] != "" || len(st["steps"].([]any)) != 0 || st["final"] != nil {
		t.Fatalf("reset: %s", r.Body)
	}
	step("abc\ndef\n")

	wantStatus(t, s.do(t, "DELETE", sessionPath(id), nil), 204)
	wantError(t, s.do(t, "GET", sessionPath(id), nil), 404, "session_not_found", "")
}

func TestSessionStdinFailureAndBytes(t *testing.T) {
	s := startDebugger(t, envOpts{maxOutput: 1024})
	body := block("bash", `printf hi`) +
		block("bash", `read -r x; [ "$x" = ok ] || { echo "got $x" >&2; exit 3; }; echo fine`) +
		block("bash", `od -An -tx1 | tr -s ' \n' ' '`)
	r := s.do(t, "POST", "/debug/sessions", map[string]any{"body": body})
	wantStatus(t, r, 201)
	id := r.obj(t)["id"].(string)

	// A stdin in the request (even "") replaces the buffer for that step.
	r = s.do(t, "POST", sessionPath(id, "step"), map[string]any{"stdin": "ignored"})
	if m := r.obj(t); m["stdin_source"] != "request" || m["stdout"] != "hi" || m["buffer"] != "hi" {
		t.Fatalf("step 1: %s", r.Body)
	}
	// A failed step changes neither the buffer nor next.
	r = s.do(t, "POST", sessionPath(id, "step"), nil)
	wantStatus(t, r, 200)
	m := r.obj(t)
	if m["ok"] != false || m["error"] != "block 2/3: non-zero exit (code 3): got hi" || m["next"] != 1.0 || m["buffer"] != "hi" ||
		m["stderr"] != "got hi\n" || m["exit_code"] != 3.0 || m["done"] != false {
		t.Fatalf("failed step: %s", r.Body)
	}
	r = s.do(t, "POST", sessionPath(id, "step"), map[string]any{"stdin": ""})
	if m := r.obj(t); m["ok"] != false || m["stdin_source"] != "request" || m["stderr"] != "got \n" {
		t.Fatalf("empty request stdin: %s", r.Body)
	}
	steps := s.do(t, "GET", sessionPath(id), nil).obj(t)["steps"].([]any)
	if len(steps) != 3 || steps[1].(map[string]any)["ok"] != false {
		t.Fatalf("history: %v", steps)
	}
	// Fix the buffer and retry.
	wantStatus(t, s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer": "ok\n"}), 200)
	if m := s.do(t, "POST", sessionPath(id, "step"), nil).obj(t); m["ok"] != true || m["stdout"] != "fine\n" {
		t.Fatalf("retry: %v", m)
	}
	// Exact bytes: a non-UTF-8 buffer goes in as base64 and reaches the block unchanged.
	r = s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer_base64": base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0xfe})})
	wantStatus(t, r, 200)
	if st := r.obj(t); st["buffer"] != "\uFFFD\x00\uFFFD" || st["buffer_base64"] != "/wD+" {
		t.Fatalf("binary buffer: %s", r.Body)
	}
	r = s.do(t, "POST", sessionPath(id, "step"), nil)
	m = r.obj(t)
	if strings.TrimSpace(m["stdout"].(string)) != "ff 00 fe" || m["done"] != true {
		t.Fatalf("binary step: %s", r.Body)
	}
	// The last block's stdout is not the output contract: final carries the bad_output envelope.
	final := m["final"].(map[string]any)
	if e := final["error"].(map[string]any); final["ok"] != false || e["code"] != "bad_output" || e["type"] != "code_execution_error" {
		t.Fatalf("final: %v", final)
	}

	// Buffer errors.
	wantError(t, s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer": strings.Repeat("x", 1025)}), 413, "request_too_large", "1025")
	wantStatus(t, s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer": strings.Repeat("x", 1024)}), 200)
	wantError(t, s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{}), 400, "invalid_json", "required")
	wantError(t, s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer": "a", "buffer_base64": "YQ=="}), 400, "invalid_json", "not both")
	wantError(t, s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer_base64": "!"}), 400, "invalid_json", "base64")
	wantError(t, s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer": 1}), 400, "invalid_json", "string")
	wantError(t, s.do(t, "POST", sessionPath(id, "step"), map[string]any{"stdn": "x"}), 400, "invalid_json", "unknown field")
}

func TestSessionErrors(t *testing.T) {
	s := startDebugger(t, envOpts{allowed: []string{"bash"}})
	unknown := strings.Repeat("0", 32)
	wantError(t, s.do(t, "GET", sessionPath(unknown), nil), 404, "session_not_found", "")
	wantError(t, s.do(t, "POST", sessionPath(unknown, "step"), nil), 404, "session_not_found", "")
	wantError(t, s.do(t, "PUT", sessionPath(unknown, "buffer"), map[string]any{"buffer": ""}), 404, "session_not_found", "")
	wantError(t, s.do(t, "POST", sessionPath(unknown, "reset"), nil), 404, "session_not_found", "")
	wantError(t, s.do(t, "DELETE", sessionPath(unknown), nil), 404, "session_not_found", "")
	// Creation validates like the chat path.
	wantError(t, s.do(t, "POST", "/debug/sessions", map[string]any{"body": "prose only"}), 422, "no_code_blocks", "")
	wantError(t, s.do(t, "POST", "/debug/sessions", map[string]any{"body": block("bash", "true") + "```bash\n"}), 422, "unclosed_fence", "")
	wantError(t, s.do(t, "POST", "/debug/sessions", map[string]any{"body": block("bash", "true") + block("python", "1")}), 422,
		"program_not_allowed", "code block 2")
	wantError(t, s.do(t, "POST", "/debug/sessions", map[string]any{"body": block("bash", "true") + block("cobol", "1")}), 422,
		"unknown_language", "")
	wantError(t, s.do(t, "POST", "/debug/sessions", map[string]any{"body": strings.Repeat(block("bash", "true"), 65)}), 400,
		"too_many_blocks", "")
	wantError(t, s.do(t, "POST", "/debug/sessions", map[string]any{"input": map[string]any{}}), 400, "invalid_messages", "")
	wantError(t, s.do(t, "POST", "/debug/sessions", `{"body":1}`), 400, "invalid_messages", "")
	if n := s.dbg.Sessions(); n != 0 {
		t.Fatalf("%d sessions after failed creations", n)
	}
}

// TestSessionConcurrentStepAndDelete: a second step while one runs is 409 step_in_progress; deleting the
// session kills the running step, whose request then answers 404.
func TestSessionConcurrentStepAndDelete(t *testing.T) {
	s := startDebugger(t, envOpts{})
	r := s.do(t, "POST", "/debug/sessions", map[string]any{"body": block("bash", "sleep 60")})
	id := r.obj(t)["id"].(string)
	// Two steps race; whichever loses answers 409 at once while the winner's block sleeps.
	replies := make(chan reply, 2)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies <- s.do(t, "POST", sessionPath(id, "step"), nil)
		}()
	}
	wantError(t, <-replies, 409, "step_in_progress", "")
	wantError(t, s.do(t, "PUT", sessionPath(id, "buffer"), map[string]any{"buffer": "x"}), 409, "step_in_progress", "")
	wantError(t, s.do(t, "POST", sessionPath(id, "reset"), nil), 409, "step_in_progress", "")
	wantStatus(t, s.do(t, "DELETE", sessionPath(id), nil), 204)
	wg.Wait()
	wantError(t, <-replies, 404, "session_not_found", "")
	if time.Since(start) > 45*time.Second {
		t.Fatalf("the deleted session's step was not killed")
	}
}

func TestSessionCapAndExpiry(t *testing.T) {
	ttl := time.Second
	s := startDebugger(t, envOpts{maxSessions: 2, ttl: ttl})
	create := func() reply {
		return s.do(t, "POST", "/debug/sessions", map[string]any{"body": block("bash", "echo x")})
	}
	a, b := create(), create()
	wantStatus(t, a, 201)
	wantStatus(t, b, 201)
	wantError(t, create(), 429, "too_many_sessions", "")
	wantStatus(t, s.do(t, "DELETE", sessionPath(b.obj(t)["id"].(string)), nil), 204)
	c := create()
	wantStatus(t, c, 201)
	idA, idC := a.obj(t)["id"].(string), c.obj(t)["id"].(string)

	// Requests keep a session alive past its TTL; idleness expires it.
	for i := 0; i < 4; i++ {
		time.Sleep(ttl / 3)
		wantStatus(t, s.do(t, "GET", sessionPath(idA), nil), 200)
	}
	wantError(t, s.do(t, "GET", sessionPath(idC), nil), 404, "session_not_found", "")
	time.Sleep(ttl + ttl/2)
	wantError(t, s.do(t, "POST", sessionPath(idA, "step"), nil), 404, "session_not_found", "")
	// Expired sessions no longer count against the cap.
	wantStatus(t, create(), 201)
	wantStatus(t, create(), 201)
}

// TestSteppedEqualsPipeline: a stepped run without edits and a pipeline run of the same body give the same
// final output (§14.3).
func TestSteppedEqualsPipeline(t *testing.T) {
	s := startDebugger(t, envOpts{})
	input := []byte(`{"tag":"same"}`)
	resolved, err := s.eng.Plan([]markdown.Source{{Text: threeBlocks}})
	if err != nil {
		t.Fatal(err)
	}
	res, _, err := s.eng.Run(context.Background(), engine.RunRequest{Resolved: resolved, Input: input})
	if err != nil || res.Err != nil {
		t.Fatalf("pipeline: %v %v", err, res.Err)
	}
	r := s.do(t, "POST", "/debug/sessions", `{"body":`+jsonString(threeBlocks)+`,"input":`+string(input)+`}`)
	id := r.obj(t)["id"].(string)
	var last map[string]any
	for i := 0; i < 3; i++ {
		last = s.do(t, "POST", sessionPath(id, "step"), nil).obj(t)
	}
	if last["stdout"] != string(res.Stdout) {
		t.Fatalf("stepped %q, pipeline %q", last["stdout"], res.Stdout)
	}
	calls, err := engine.Answer(res.Stdout, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := last["final"].(map[string]any)["tool_calls"].([]any)
	if len(got) != len(calls) {
		t.Fatalf("calls: %v vs %v", got, calls)
	}
	for i, c := range calls {
		fn := got[i].(map[string]any)["function"].(map[string]any)
		if fn["name"] != c.Name || fn["arguments"] != c.Arguments {
			t.Fatalf("call %d: %v vs %+v", i, fn, c)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
