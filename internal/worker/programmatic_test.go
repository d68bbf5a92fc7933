package worker

// Programmatic tool calling end to end (issue 40 item 5): the hub driven as danny-avila/agents'
// ProgrammaticToolCalling.ts and BashProgrammaticToolCalling.ts drive the Code API — POST
// /v1/exec/programmatic {code, tools, session_id, timeout, files?, lang?}, then while the reply says
// tool_call_required the client runs the tools and posts {continuation_token, tool_results} (at most 20
// round trips) — with a worker running codellm's runner in the sandbox.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/hub"
)

const otherKey = "other-tenant-key-for-ptc"

// ptcWorker is libreChatWorker with a second tenant's key.
func ptcWorker(t *testing.T, name string, sup Supervisor) *testHub {
	t.Helper()
	h := newTestHub(t, func(c *hub.Config) {
		withFiles(t)(c)
		c.ClientKeys = append(c.ClientKeys, hub.ClientKey{Key: otherKey, TenantID: "other"})
	})
	id, path := h.pair(t, name)
	start(t, baseConfig(h, id, path, sup))
	h.waitReady(t, name)
	return h
}

type ptcToolCall struct {
	ID    string         `json:"id"`
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
}

type ptcResponse struct {
	Status            string        `json:"status"`
	ContinuationToken string        `json:"continuation_token"`
	ToolCalls         []ptcToolCall `json:"tool_calls"`
	PartialStdout     string        `json:"partial_stdout"`
	Stdout            string        `json:"stdout"`
	Stderr            string        `json:"stderr"`
	Error             string        `json:"error"`
	Files             []execFile    `json:"files"`
	SessionID         string        `json:"session_id"`
}

// libreChatHeaders are what agents' makeRequest sends besides the key.
var libreChatHeaders = map[string]string{"User-Agent": "LibreChat/1.0"}

func ptcPost(t *testing.T, h *testHub, body any, hdr map[string]string) (reply, ptcResponse) {
	t.Helper()
	b, _ := json.Marshal(body)
	if hdr == nil {
		hdr = libreChatHeaders
	}
	r := h.client(t, context.Background(), "/v1/exec/programmatic", string(b), hdr)
	var res ptcResponse
	if r.status == 200 && json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("programmatic reply is not JSON: %s", r.body)
	}
	return r, res
}

// ptcLoop is agents' Phase 2: run each requested tool (executeTools) and continue, until the reply is not
// tool_call_required. It returns the final reply and the calls made, in order.
func ptcLoop(t *testing.T, h *testHub, first ptcResponse, tools map[string]func(map[string]any) (any, error)) (ptcResponse, []string) {
	t.Helper()
	res, calls := first, []string(nil)
	for trip := 0; res.Status == "tool_call_required"; trip++ {
		if trip >= 20 {
			t.Fatal("exceeded maximum round trips (20)")
		}
		if len(res.ToolCalls) == 0 || res.ContinuationToken == "" || res.SessionID != first.SessionID {
			t.Fatalf("tool_call_required without calls, token or the session: %+v", res)
		}
		var results []map[string]any
		for _, c := range res.ToolCalls {
			in, _ := json.Marshal(c.Input)
			calls = append(calls, c.Name+string(in))
			out, err := tools[c.Name](c.Input)
			if err != nil {
				results = append(results, map[string]any{"call_id": c.ID, "result": nil, "is_error": true, "error_message": err.Error()})
			} else {
				results = append(results, map[string]any{"call_id": c.ID, "result": out, "is_error": false})
			}
		}
		r, next := ptcPost(t, h, map[string]any{"continuation_token": res.ContinuationToken, "tool_results": results}, nil)
		if r.status != 200 {
			t.Fatalf("continuation: %d %s", r.status, r.body)
		}
		res = next
	}
	return res, calls
}

var weatherTools = []map[string]any{
	{"name": "get-weather", "description": "Current weather of a city", "parameters": map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}},
	{"name": "notify", "description": "Send a message", "parameters": map[string]any{
		"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}}},
}

func weatherImpl() map[string]func(map[string]any) (any, error) {
	temps := map[string]float64{"Paris": 21, "Oslo": 4, "Lima": 18}
	return map[string]func(map[string]any) (any, error){
		"get-weather": func(in map[string]any) (any, error) {
			c, _ := in["city"].(string)
			if v, ok := temps[c]; ok {
				return map[string]any{"city": c, "temp": v}, nil
			}
			return nil, fmt.Errorf("unknown city %q", c)
		},
		"notify": func(in map[string]any) (any, error) { return "sent: " + fmt.Sprint(in["text"]), nil },
	}
}

const ptcPython = `import csv
cities = [r["city"] for r in csv.DictReader(open("/mnt/data/cities.csv"))]
print("cities", len(cities))
paris, oslo = await asyncio.gather(get_weather(city=cities[0]), get_weather(city=cities[1]))
temps = {paris["city"]: paris["temp"], oslo["city"]: oslo["temp"]}
try:
    await get_weather(city="Atlantis")
except ToolExecutionError as e:
    print("error:", e)
ack = await notify(text="warmest is " + max(temps, key=temps.get))
with open("/mnt/data/report.txt", "w") as f:
    f.write(json.dumps(temps, sort_keys=True))
print(ack)
`

// TestLibreChatProgrammaticPython: a python PTC run with an uploaded input file, parallel calls through
// asyncio.gather, a tool error raised as ToolExecutionError, and a generated file: every round trip has
// upstream's shape, the calls reach the client in program order with keyword arguments as input, and the
// final reply carries stdout and the file, downloadable from its session.
func TestLibreChatProgrammaticPython(t *testing.T) {
	for _, stateful := range []bool{false, true} {
		name := map[bool]string{false: "stateless", true: "stateful"}[stateful]
		t.Run(name, func(t *testing.T) {
			h := ptcWorker(t, "ptc-"+name, newEmbedded(t, stateful))
			upSID, upFID := uploadLikeLibreChat(t, h, "cities.csv", []byte("city\nParis\nOslo\n"))
			r, first := ptcPost(t, h, map[string]any{"code": ptcPython, "tools": weatherTools, "timeout": 30000,
				"files": []map[string]any{{"id": upFID, "name": "cities.csv", "storage_session_id": upSID}}}, nil)
			if r.status != 200 || first.Status != "tool_call_required" || !librechatID.MatchString(first.SessionID) {
				t.Fatalf("first: %d %s", r.status, r.body)
			}
			var keys map[string]json.RawMessage
			_ = json.Unmarshal(r.body, &keys)
			if got := sortedKeys(keys); got != "continuation_token partial_stdout session_id status tool_calls" {
				t.Fatalf("first reply members: %s (%s)", got, r.body)
			}
			if first.PartialStdout != "cities 2\n" || len(first.ToolCalls) != 1 || first.ToolCalls[0].ID != "call_001" {
				t.Fatalf("first reply: %s", r.body)
			}
			final, calls := ptcLoop(t, h, first, weatherImpl())
			want := []string{`get-weather{"city":"Paris"}`, `get-weather{"city":"Oslo"}`, `get-weather{"city":"Atlantis"}`, `notify{"text":"warmest is Paris"}`}
			if strings.Join(calls, " ") != strings.Join(want, " ") {
				t.Fatalf("calls %q, want %q", calls, want)
			}
			if final.Status != "completed" || final.Stdout != "cities 2\nerror: unknown city \"Atlantis\"\nsent: warmest is Paris\n" || final.SessionID != first.SessionID {
				t.Fatalf("final: %+v", final)
			}
			if len(final.Files) != 1 || final.Files[0].Name != "report.txt" {
				t.Fatalf("generated files %+v (want report.txt only)", final.Files)
			}
			if got := download(t, h, final.SessionID, final.Files[0].ID); string(got) != `{"Oslo": 4, "Paris": 21}` {
				t.Fatalf("report.txt = %q", got)
			}
		})
	}
}

func sortedKeys(m map[string]json.RawMessage) string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return strings.Join(k, " ")
}

// TestLibreChatProgrammaticBash: lang "bash" (BashProgrammaticToolCalling.ts): tools are functions taking
// one JSON string, a call in $(...) round-trips, results print as compact JSON (strings as they are), and
// an error result makes the function fail with the message on stderr.
func TestLibreChatProgrammaticBash(t *testing.T) {
	h := ptcWorker(t, "ptc-bash", newEmbedded(t, false))
	code := `echo "start"
paris=$(get_weather '{"city": "Paris"}')
echo "paris: $paris"
if ! get_weather '{"city": "Atlantis"}'; then echo "atlantis failed"; fi
msg=$(notify '{"text": "done"}')
printf '%s\n' "$msg" > /mnt/data/out.txt
echo "$msg"
`
	r, first := ptcPost(t, h, map[string]any{"lang": "bash", "code": code, "tools": weatherTools, "timeout": 30000}, nil)
	if r.status != 200 || first.Status != "tool_call_required" || first.PartialStdout != "start\n" ||
		len(first.ToolCalls) != 1 || first.ToolCalls[0].Name != "get-weather" || first.ToolCalls[0].Input["city"] != "Paris" {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	final, calls := ptcLoop(t, h, first, weatherImpl())
	if len(calls) != 3 || final.Status != "completed" ||
		final.Stdout != "start\nparis: {\"city\":\"Paris\",\"temp\":21}\natlantis failed\nsent: done\n" ||
		!strings.Contains(final.Stderr, `unknown city "Atlantis"`) {
		t.Fatalf("final: %+v (calls %q)", final, calls)
	}
	if len(final.Files) != 1 || final.Files[0].Name != "out.txt" {
		t.Fatalf("generated files: %+v (want out.txt only, no .ptc_run)", final.Files)
	}
}

// TestProgrammaticContinuationOnce: a continuation retried after its answer (the same token and results)
// gets that answer byte for byte — the code, which prints a fresh random number on every run, did not run
// again — while other results for a used token, an older token, a forged call_id, another tenant, a
// malformed and an unknown token are refused in the Code API's {"error"} envelope.
func TestProgrammaticContinuationOnce(t *testing.T) {
	h := ptcWorker(t, "ptc-once", newEmbedded(t, false))
	code := "import random\nprint(random.random())\na = await notify(text='one')\nb = await notify(text='two')\nprint(a, b)\n"
	_, first := ptcPost(t, h, map[string]any{"code": code, "tools": weatherTools}, nil)
	if first.Status != "tool_call_required" {
		t.Fatalf("first: %+v", first)
	}
	cont := func(tok, callID string, result any, key string) reply {
		b, _ := json.Marshal(map[string]any{"continuation_token": tok, "tool_results": []map[string]any{{"call_id": callID, "result": result, "is_error": false}}})
		return h.clientAs(t, context.Background(), key, "/v1/exec/programmatic", string(b), nil)
	}
	forged := cont(first.ContinuationToken, "call_042", "x", apiKey)
	foreign := cont(first.ContinuationToken, "call_001", "x", otherKey)
	second := cont(first.ContinuationToken, "call_001", "ok1", apiKey)
	again := cont(first.ContinuationToken, "call_001", "ok1", apiKey)
	changed := cont(first.ContinuationToken, "call_001", "other", apiKey)
	if forged.status != 400 || !strings.Contains(string(forged.body), `call_id \"call_042\" was not issued`) {
		t.Fatalf("forged call_id: %d %s", forged.status, forged.body)
	}
	if foreign.status != 403 || string(foreign.body) != `{"error":"Forbidden"}` {
		t.Fatalf("another tenant's continuation: %d %s", foreign.status, foreign.body)
	}
	if second.status != 200 || string(again.body) != string(second.body) || again.status != 200 {
		t.Fatalf("retried continuation: %d %s / %d %s", second.status, second.body, again.status, again.body)
	}
	if changed.status != 409 || !strings.Contains(string(changed.body), "already used with other tool_results") {
		t.Fatalf("used token with other results: %d %s", changed.status, changed.body)
	}
	var mid ptcResponse
	_ = json.Unmarshal(second.body, &mid)
	last := cont(mid.ContinuationToken, "call_002", "ok2", apiKey)
	var done ptcResponse
	if last.status != 200 || json.Unmarshal(last.body, &done) != nil || done.Status != "completed" ||
		!strings.HasSuffix(done.Stdout, "\nok1 ok2\n") || done.SessionID != first.SessionID {
		t.Fatalf("last: %d %s (after %s)", last.status, last.body, second.body)
	}
	if old := cont(first.ContinuationToken, "call_001", "ok1", apiKey); old.status != 409 {
		t.Fatalf("an older token: %d %s", old.status, old.body)
	}
	if r := cont("not-a-token", "call_001", "x", apiKey); r.status != 400 || string(r.body) != `{"error":"Invalid continuation token"}` {
		t.Fatalf("malformed token: %d %s", r.status, r.body)
	}
	unknown := []byte(`{"execution_id":"AAAAAAAAAAAAAAAAAAAAA","step":1}`)
	if r := cont(base64.StdEncoding.EncodeToString(unknown), "call_001", "x", apiKey); r.status != 404 || string(r.body) != `{"error":"Execution not found or expired"}` {
		t.Fatalf("unknown execution: %d %s", r.status, r.body)
	}
}

// TestProgrammaticRefusals: the first request's checks, each with upstream's status and message.
func TestProgrammaticRefusals(t *testing.T) {
	h := ptcWorker(t, "ptc-refuse", newEmbedded(t, false))
	tool := []map[string]any{{"name": "t"}}
	for _, c := range []struct {
		body any
		want string
	}{
		{map[string]any{"tools": tool}, `{"error":"Missing required field: code"}`},
		{map[string]any{"code": "x", "tools": []any{}}, `{"error":"Missing required field: tools (must be a non-empty array of {name, description?, parameters?})"}`},
		{map[string]any{"code": "x", "tools": tool, "lang": "ruby"}, `{"error":"Unsupported language \"ruby\"; supported values are \"python\" and \"bash\""}`},
		{map[string]any{"code": "x", "tools": tool, "timeout": -5}, `{"error":"timeout must be a positive number of milliseconds"}`},
		{map[string]any{"code": "x", "tools": []map[string]any{{"name": "a-b"}, {"name": "a.b"}}, "lang": "bash"},
			`{"error":"Tool names \"a-b\" and \"a.b\" normalize to the same function identifier \"a_b\"; rename one to avoid collision"}`},
		{map[string]any{"code": "x", "tools": tool, "files": []map[string]any{{"id": "AAAAAAAAAAAAAAAAAAAAA", "name": "f", "session_id": "AAAAAAAAAAAAAAAAAAAAA"}}},
			`{"error":"files[0]: no file \"AAAAAAAAAAAAAAAAAAAAA\" in session \"AAAAAAAAAAAAAAAAAAAAA\""}`},
		{map[string]any{"continuation_token": "x", "tool_results": []any{}}, `{"error":"tool_results must be a non-empty array; resubmit with at least one result per pending tool call"}`},
	} {
		r, _ := ptcPost(t, h, c.body, nil)
		if r.status != 400 || string(r.body) != c.want {
			t.Errorf("%v: %d %s, want 400 %s", c.body, r.status, r.body, c.want)
		}
	}
	r := h.clientAs(t, context.Background(), "wrong", "/v1/exec/programmatic", `{}`, nil)
	if r.status != 401 || string(r.body) != `{"error":"Missing or invalid API key"}` {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
}

// TestProgrammaticFailures: code that raises ends status "error" with the traceback on stderr; a call of
// a tool the request did not register is refused (upstream's unregistered-tool error), nothing handed to
// the client.
func TestProgrammaticFailures(t *testing.T) {
	h := ptcWorker(t, "ptc-fail", newEmbedded(t, false))
	_, res := ptcPost(t, h, map[string]any{"code": "print('before')\nraise ValueError('boom')", "tools": weatherTools}, nil)
	if res.Status != "error" || res.Error != "Sandbox exited with code 1" || res.Stdout != "before\n" || !strings.Contains(res.Stderr, "File \"<code>\", line 2, in <module>\n    raise ValueError('boom')") || !strings.Contains(res.Stderr, "ValueError: boom") {
		t.Fatalf("raising code: %+v", res)
	}
	_, res = ptcPost(t, h, map[string]any{"code": "await _ptc_call('rm-rf', {})", "tools": weatherTools}, nil)
	if res.Status != "error" || res.Error != "Sandbox requested an unregistered tool: rm-rf" || len(res.ToolCalls) != 0 {
		t.Fatalf("unregistered tool: %+v", res)
	}
}

// TestProgrammaticCancel: POST /v1/exec/programmatic/cancel {request_id} stops the run of the request
// that carries that X-LibreChat-Code-Request-ID (the worker's process is cancelled, the request answers
// cancelled long before its 60 s sleep); a second cancel finds it completed, another tenant is refused,
// the ID cannot be reused, and a malformed ID is refused.
func TestProgrammaticCancel(t *testing.T) {
	h := ptcWorker(t, "ptc-cancel", newEmbedded(t, false))
	const rid = "req_0123456789abcdef"
	hdr := map[string]string{"User-Agent": "LibreChat/1.0", "X-LibreChat-Code-Request-ID": rid}
	got := make(chan ptcResponse, 1)
	go func() {
		_, res := ptcPost(t, h, map[string]any{"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", "tools": weatherTools, "timeout": 90000}, hdr)
		got <- res
	}()
	cancel := func(key, id string) reply {
		return h.clientAs(t, context.Background(), key, "/v1/exec/programmatic/cancel", `{"request_id":"`+id+`"}`, nil)
	}
	// Give the run time to reach the worker; a cancel that came first would end it as cancelled too
	// (checked at the end), so this only makes the usual case the one under test.
	time.Sleep(700 * time.Millisecond)
	if r := cancel(otherKey, rid); r.status != 403 || string(r.body) != `{"error":"Programmatic request belongs to another principal"}` {
		t.Fatalf("another tenant's cancel: %d %s", r.status, r.body)
	}
	if r := cancel(apiKey, rid); r.status != 202 || string(r.body) != `{"status":"cancellation_requested"}` {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	select {
	case res := <-got:
		if res.Status != "error" || res.Error != "Programmatic execution request cancelled" || !librechatID.MatchString(res.SessionID) {
			t.Fatalf("cancelled request: %+v", res)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled request did not end")
	}
	if r := cancel(apiKey, rid); r.status != 200 || string(r.body) != `{"status":"already_completed"}` {
		t.Fatalf("second cancel: %d %s", r.status, r.body)
	}
	if r, _ := ptcPost(t, h, map[string]any{"code": "print(1)", "tools": weatherTools}, hdr); r.status != 409 || string(r.body) != `{"error":"Programmatic request ID is already in use"}` {
		t.Fatalf("reused request ID: %d %s", r.status, r.body)
	}
	if r := cancel(apiKey, "short"); r.status != 400 || string(r.body) != `{"error":"Invalid or missing request_id"}` {
		t.Fatalf("malformed request_id: %d %s", r.status, r.body)
	}
	// A cancel that arrives first: the request is answered cancelled and nothing runs.
	if r := cancel(apiKey, "req_cancelled_before_1"); r.status != 202 {
		t.Fatalf("early cancel: %d %s", r.status, r.body)
	}
	early := map[string]string{"X-LibreChat-Code-Request-ID": "req_cancelled_before_1"}
	if _, res := ptcPost(t, h, map[string]any{"code": "print(1)", "tools": weatherTools}, early); res.Status != "error" || res.Error != "Programmatic execution request cancelled" {
		t.Fatalf("request after its cancel: %+v", res)
	}
}
