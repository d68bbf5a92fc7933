package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// localRunner settles a sandbox assignment by running its entry file (main.py or main.sh, the generated
// programmatic program) with the local interpreter in a fresh directory, as a runner would.
func localRunner(t *testing.T, w *testWorker) func(a *bridge.Assignment) bridge.Settlement {
	return func(a *bridge.Assignment) bridge.Settlement {
		body, _ := a.Request.Object().Get("body")
		lang, _ := body.(*bridge.Object).Get("language")
		files, _ := body.(*bridge.Object).Get("files")
		entry := files.([]any)[0].(*bridge.Object)
		name, _ := entry.Get("name")
		content, _ := entry.Get("content")
		dir := t.TempDir()
		_ = os.WriteFile(filepath.Join(dir, name.(string)), []byte(content.(string)), 0o644)
		interp := map[string]string{"python": "python3", "bash": "bash"}[lang.(string)]
		cmd := exec.Command(interp, name.(string))
		cmd.Dir = dir
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := 0.0
		if err := cmd.Run(); err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Errorf("%s: %v", interp, err)
			} else {
				code = float64(ee.ExitCode())
			}
		}
		run := &bridge.Object{}
		run.Set("stdout", stdout.String())
		run.Set("stderr", stderr.String())
		run.Set("code", code)
		run.Set("signal", nil)
		if code != 0 {
			run.Set("status", "RE")
			run.Set("message", "non-zero exit code")
		}
		out := &bridge.Object{}
		out.Set("run", run)
		out.Set("language", lang)
		return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: w.incarnation, Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)}
	}
}

var goldenToken = regexp.MustCompile(`"continuation_token":"[^"]*"`)

// TestProgrammaticGolden pins /v1/exec/programmatic and its cancel route to upstream's shapes
// (code-interpreter service/src/routes/programmatic.ts; agents' ProgrammaticExecutionResponse): a python
// and a bash execution round trip by round trip, and the refusals with their statuses and messages.
// Regenerate with `go test ./internal/hub -run TestProgrammaticGolden -update`.
func TestProgrammaticGolden(t *testing.T) {
	for _, interp := range []string{"python3", "bash"} {
		if _, err := exec.LookPath(interp); err != nil {
			t.Skipf("%s is not installed", interp)
		}
	}
	h := newTestHub(t, nil)
	w := newWorker(t, h, "vm-ptc")
	w.pair(h)
	w.mustRegister()
	defer w.serve(localRunner(t, w))()
	tools := `[{"name":"get-weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	norm := normalizer{}
	var got []fileCall
	var token string
	call := func(name, path, body string, hdr map[string]string) {
		r := h.client(t, path, strings.ReplaceAll(body, "<token>", token), hdr)
		if m := regexp.MustCompile(`"continuation_token":"([^"]*)"`).FindStringSubmatch(string(r.body)); m != nil {
			token = m[1]
		}
		got = append(got, fileCall{Name: name, Method: "POST", Path: path, Form: norm.apply(body), Status: r.status,
			Body: norm.apply(goldenToken.ReplaceAllString(string(r.body), `"continuation_token":"<token>"`))})
	}
	const ptc = "/v1/exec/programmatic"
	call("python: first request", ptc, `{"code":"print('hi')\nw = await get_weather(city='Paris')\nprint(w['temp'])","tools":`+tools+`,"session_id":"","timeout":20000}`, nil)
	call("python: continuation", ptc, `{"continuation_token":"<token>","tool_results":[{"call_id":"call_001","result":{"temp":21},"is_error":false}]}`, nil)
	call("bash: first request", ptc, `{"lang":"bash","code":"echo start\nget_weather '{\"city\":\"Oslo\"}' || echo failed","tools":`+tools+`,"timeout":20000}`, nil)
	call("bash: continuation with a tool error", ptc, `{"continuation_token":"<token>","tool_results":[{"call_id":"call_001","result":null,"is_error":true,"error_message":"no such city"}]}`, nil)
	call("python: code that fails", ptc, `{"code":"raise SystemExit(3)","tools":`+tools+`}`, nil)
	call("missing code", ptc, `{"tools":`+tools+`}`, nil)
	call("too many tools", ptc, `{"code":"x","tools":[`+strings.TrimSuffix(strings.Repeat(`{"name":"t"},`, 101), ",")+`]}`, nil)
	call("not JSON", ptc, `nope`, nil)
	call("bad request ID", ptc, `{"code":"x","tools":`+tools+`}`, map[string]string{"X-LibreChat-Code-Request-ID": "short"})
	call("tool_results not an array", ptc, `{"continuation_token":"x","tool_results":{}}`, nil)
	call("cancel: no request_id", ptc+"/cancel", `{}`, nil)
	call("cancel: an ID not seen yet", ptc+"/cancel", `{"request_id":"abcdefghijklmnop"}`, nil)

	compareGoldenCalls(t, "testdata/programmatic_golden.json", got)
}

// ptcScriptedRunner answers a programmatic run without running it: the run stops at the next call the
// program's embedded history lacks, until calls calls were made, then completes. It isolates the hub's
// cost of a round trip (store transactions, program generation, dispatch) from the interpreter's.
func ptcScriptedRunner(w *testWorker, calls int, final string) func(a *bridge.Assignment) bridge.Settlement {
	start := regexp.MustCompile(`_PTC_START = "([^"]+)"`)
	end := regexp.MustCompile(`_PTC_END = "([^"]+)"`)
	return func(a *bridge.Assignment) bridge.Settlement {
		body, _ := a.Request.Object().Get("body")
		files, _ := body.(*bridge.Object).Get("files")
		program, _ := files.([]any)[0].(*bridge.Object).Get("content")
		src := program.(string)
		n := strings.Count(src, `\"tool_name\":`) + 1 // recorded calls, as the history literal spells them
		stdout := final
		if n <= calls {
			stdout = fmt.Sprintf("\n%s\n{\"call_id\": \"call_%03d\", \"tool_name\": \"t\"}\n{}\n%s\n",
				start.FindStringSubmatch(src)[1], n, end.FindStringSubmatch(src)[1])
		}
		run := &bridge.Object{}
		run.Set("stdout", stdout)
		run.Set("stderr", "")
		run.Set("code", 0.0)
		out := &bridge.Object{}
		out.Set("run", run)
		return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: w.incarnation, Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)}
	}
}

// One programmatic execution of two tool calls (three runs: two round trips) through a real listener
// and the bbolt store, with a worker that answers at once.
func BenchmarkProgrammaticExecution(b *testing.B) {
	h := newTestHub(b, func(c *Config) { c.RateLimits = RateLimits{Off: true} })
	w := newWorker(b, h, "bench-ptc")
	w.pair(h)
	w.mustRegister()
	defer w.serve(ptcScriptedRunner(w, 2, "done\n"))()
	tok := regexp.MustCompile(`"continuation_token":"([^"]*)"`)
	for b.Loop() {
		r := h.client(b, "/v1/exec/programmatic", `{"code":"x","tools":[{"name":"t"}]}`, nil)
		for i := 1; ; i++ {
			m := tok.FindStringSubmatch(string(r.body))
			if m == nil {
				break
			}
			r = h.client(b, "/v1/exec/programmatic", fmt.Sprintf(`{"continuation_token":%q,"tool_results":[{"call_id":"call_%03d","result":1,"is_error":false}]}`, m[1], i), nil)
		}
		if r.status != 200 || !strings.Contains(string(r.body), `"status":"completed"`) {
			b.Fatalf("%d %s", r.status, r.body)
		}
	}
}

// TestProgrammaticLargeAnswer: a final answer too large to keep beside the execution's state (over half of
// its cap) still reaches the client whole; a retry of that continuation is told it was answered (409)
// instead of running the code again.
func TestProgrammaticLargeAnswer(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "vm-ptc-large")
	w.pair(h)
	w.mustRegister()
	big := strings.Repeat("x", ptcMaxStateBytes/2+1)
	defer w.serve(ptcScriptedRunner(w, 1, big))()
	first := h.client(t, "/v1/exec/programmatic", `{"code":"x","tools":[{"name":"t"}]}`, nil)
	m := goldenToken.FindString(string(first.body))
	if first.status != 200 || m == "" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	cont := `{` + m + `,"tool_results":[{"call_id":"call_001","result":1,"is_error":false}]}`
	last := h.client(t, "/v1/exec/programmatic", cont, nil)
	var res struct{ Status, Stdout string }
	if last.status != 200 || json.Unmarshal(last.body, &res) != nil || res.Status != "completed" || res.Stdout != big {
		t.Fatalf("large answer: %d %.200s", last.status, last.body)
	}
	again := h.client(t, "/v1/exec/programmatic", cont, nil)
	if again.status != 409 || !strings.Contains(string(again.body), "too large to keep for a retry") {
		t.Fatalf("retry: %d %.300s", again.status, again.body)
	}
}

// TestProgrammaticPinned: X-LibreChat-Code-Worker-ID on the first request pins every run of the
// execution, continuations included (they carry no header, as agents' client sends none): a pin to a
// worker that is not online never runs elsewhere, a malformed one is 400 in the route's envelope.
func TestProgrammaticPinned(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "vm-pin")
	w.pair(h)
	w.mustRegister()
	var ran []string
	var mu sync.Mutex
	script := ptcScriptedRunner(w, 1, "done\n")
	defer w.serve(func(a *bridge.Assignment) bridge.Settlement {
		mu.Lock()
		ran = append(ran, a.AssignmentID)
		mu.Unlock()
		return script(a)
	})()
	body := `{"code":"x","tools":[{"name":"t"}],"timeout":2000}`
	ghost := h.client(t, "/v1/exec/programmatic", body, map[string]string{HeaderLibreChatWorker: "ghost-vm"})
	if ghost.status != 200 || !strings.Contains(string(ghost.body), `"status":"error","error":"worker_unavailable: `) {
		t.Fatalf("pin to a worker that is not online: %d %s", ghost.status, ghost.body)
	}
	if bad := h.client(t, "/v1/exec/programmatic", body, map[string]string{HeaderLibreChatWorker: "-bad id"}); bad.status != 400 ||
		!strings.HasPrefix(string(bad.body), `{"error":"Invalid code bridge worker ID`) {
		t.Fatalf("malformed pin: %d %s", bad.status, bad.body)
	}
	mu.Lock()
	if len(ran) != 0 {
		t.Fatalf("a pinned execution ran on another worker: %v", ran)
	}
	mu.Unlock()
	first := h.client(t, "/v1/exec/programmatic", body, map[string]string{HeaderLibreChatWorker: "vm-pin"})
	m := goldenToken.FindString(string(first.body))
	if first.status != 200 || m == "" {
		t.Fatalf("pinned to the serving worker: %d %s", first.status, first.body)
	}
	last := h.client(t, "/v1/exec/programmatic", `{`+m+`,"tool_results":[{"call_id":"call_001","result":1,"is_error":false}]}`, nil)
	if last.status != 200 || !strings.Contains(string(last.body), `"status":"completed"`) || len(ran) != 2 {
		t.Fatalf("continuation: %d %s (runs %d)", last.status, last.body, len(ran))
	}
}

// TestProgrammaticRateLimited: programmatic requests, continuations included, count against the caller's
// /v1/exec limit and are refused in its body (upstream's executionLimiter guards both routes).
func TestProgrammaticRateLimited(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.RateLimits = RateLimits{Exec: RateLimit{Max: 2, Window: time.Hour}} })
	for i, want := range []int{400, 400, 429} {
		r := h.client(t, "/v1/exec/programmatic", `{"tools":[{"name":"t"}]}`, nil)
		if r.status != want || (want == 429 && (!strings.HasPrefix(string(r.body), `{"error":"rate_limited"`) || r.header.Get("Retry-After") == "")) {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
}
