package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/server"
	"github.com/codellm/codellm/internal/slots"

	"github.com/codellm/codellm/internal/testhelp"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	goopenai "github.com/sashabaranov/go-openai"
)

const fence = "```"

func block(label, code string) string { return fence + label + "\n" + code + "\n" + fence + "\n" }

// fleetBody is the role body of openai-contract §15.3.
var fleetBody = "Keep index/changed.md in sync with the changed files.\n\n" +
	block("python", `import json, os
bag = json.load(open(os.environ["FLEET_INPUT"]))
for f in bag.get("changed_files") or []:
    print(f["path"])`) + "\n" +
	block("python", `import json, sys
paths = [l.strip() for l in sys.stdin if l.strip()]
links = "".join("- [[%s]]\n" % p for p in paths)
print(json.dumps({"changes": [
    {"path": "index/changed.md", "content": "# Changed\n" + links},
    {"path": "index/log.md", "find": "<!-- next -->", "replace": "<!-- next -->\n" + links}],
  "answer": "indexed %d file(s)" % len(paths)}))`)

const fleetBag = `{"changed_files":[{"path":"notes/a.md","event":"update","path_id":11,"version":4,"title":"A","content":"…"},{"path":"notes/b.md","event":"create","path_id":12,"version":1,"title":"B","content":"…"}],"change_file":null,"attached_notes":null,"depth":1}`

var fleetWant = []call{
	{"write_note", map[string]any{"path": "index/changed.md", "content": "# Changed\n- [[notes/a.md]]\n- [[notes/b.md]]\n"}},
	{"patch_note", map[string]any{"path": "index/log.md", "find": "<!-- next -->", "replace": "<!-- next -->\n- [[notes/a.md]]\n- [[notes/b.md]]\n"}},
	{"finish", map[string]any{"answer": "indexed 2 file(s)"}},
}

func fleetTools(names ...string) []goopenai.Tool {
	params := map[string]string{
		"search":     `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`,
		"read_note":  `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`,
		"write_note": `{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`,
		"patch_note": `{"type":"object","properties":{"path":{"type":"string"},"find":{"type":"string"},"replace":{"type":"string"}},"required":["path","find","replace"]}`,
		"finish":     `{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`,
	}
	var tools []goopenai.Tool
	for _, n := range names {
		tools = append(tools, goopenai.Tool{Type: goopenai.ToolTypeFunction, Function: &goopenai.FunctionDefinition{
			Name: n, Description: "…", Parameters: json.RawMessage(params[n])}})
	}
	return tools
}

var allFleetTools = []string{"search", "read_note", "write_note", "patch_note", "finish"}

// fleetRequest builds the request exactly as fleet's runtime does (§15.1), with fleet's client library.
func fleetRequest(model string) goopenai.ChatCompletionRequest {
	return goopenai.ChatCompletionRequest{
		Model: model,
		Messages: []goopenai.ChatCompletionMessage{
			{Role: "system", Content: "You are a role in a knowledge base. Rules: be careful.\nRead scope: **\nWrite scope: index/**\n\nInstruction:\n" + fleetBody},
			{Role: "system", Name: "fleet_input", Content: fleetBag},
			{Role: "user", Content: "Begin."},
		},
		Tools:               fleetTools(allFleetTools...),
		MaxCompletionTokens: 100000,
	}
}

func goClient(ts *testServer) *goopenai.Client {
	cfg := goopenai.DefaultConfig(ts.Key)
	cfg.BaseURL = ts.URL + "/v1"
	return goopenai.NewClientWithConfig(cfg)
}

func oaiClient(ts *testServer) oai.Client {
	key := ts.Key
	if key == "" {
		key = "unused"
	}
	return oai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// toCalls parses n tool calls given by get, checking their ids; it serves both clients' types.
func toCalls(t *testing.T, n int, get func(i int) (id, name, args string)) []call {
	t.Helper()
	var out []call
	for i := 0; i < n; i++ {
		id, name, raw := get(i)
		if !freshCallID(id) {
			t.Fatalf("call %d id %q", i, id)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			t.Fatal(err)
		}
		out = append(out, call{name, args})
	}
	return out
}

func goCalls(t *testing.T, tcs []goopenai.ToolCall) []call {
	t.Helper()
	return toCalls(t, len(tcs), func(i int) (string, string, string) {
		return tcs[i].ID, tcs[i].Function.Name, tcs[i].Function.Arguments
	})
}

func oaiCalls(t *testing.T, tcs []oai.ChatCompletionMessageToolCallUnion) []call {
	t.Helper()
	return toCalls(t, len(tcs), func(i int) (string, string, string) {
		return tcs[i].ID, tcs[i].Function.Name, tcs[i].Function.Arguments
	})
}

func sameCalls(t *testing.T, got, want []call) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tool calls:\n got  %v\n want %v", got, want)
	}
}

// G1: one bash block, both clients.
func TestG1OneBlockBothClients(t *testing.T) {
	ts := startServer(t, options{cfg: func(c *server.Config) { c.APIKey = "k-123" }})
	body := block("bash", `echo '{"changes":[{"path":"a.md","content":"x"}],"answer":"ok"}'`)
	want := []call{{"write_note", map[string]any{"path": "a.md", "content": "x"}}, {"finish", map[string]any{"answer": "ok"}}}

	resp, err := goClient(ts).CreateChatCompletion(context.Background(), goopenai.ChatCompletionRequest{
		Model: "codellm", Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: body}}})
	if err != nil {
		t.Fatal(err)
	}
	sameCalls(t, goCalls(t, resp.Choices[0].Message.ToolCalls), want)
	if resp.Usage.TotalTokens != 0 || resp.Model != "codellm" || !strings.HasPrefix(resp.ID, "codellm-") || len(resp.ID) != len("codellm-")+24 {
		t.Fatalf("usage %+v model %q id %q", resp.Usage, resp.Model, resp.ID)
	}

	c := oaiClient(ts)
	cc, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model: "codellm", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(body)}})
	if err != nil {
		t.Fatal(err)
	}
	sameCalls(t, oaiCalls(t, cc.Choices[0].Message.ToolCalls), want)
	if cc.Choices[0].FinishReason != "tool_calls" || cc.Object != "chat.completion" {
		t.Fatalf("finish_reason %q object %q", cc.Choices[0].FinishReason, cc.Object)
	}
}

// G5 and G6: the fleet request of §15.3 through fleet's own client; model echoed, absent → codellm.
func TestG5FleetRequest(t *testing.T) {
	ts := startServer(t, options{cfg: func(c *server.Config) { c.APIKey = "fleet-key" }})
	for _, model := range []string{"codellm", "gpt-x"} {
		resp, err := goClient(ts).CreateChatCompletion(context.Background(), fleetRequest(model))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Model != model {
			t.Fatalf("model %q, want %q", resp.Model, model)
		}
		sameCalls(t, goCalls(t, resp.Choices[0].Message.ToolCalls), fleetWant)
	}
	// model absent.
	req := fleetRequest("")
	raw, _ := json.Marshal(req)
	var m map[string]any
	json.Unmarshal(raw, &m)
	delete(m, "model")
	status, _, body := ts.post(t, "/v1/chat/completions", m)
	c, calls := decodeCompletion(t, status, body)
	if c.Model != "codellm" {
		t.Fatalf("model %q, want codellm", c.Model)
	}
	sameCalls(t, calls, fleetWant)
}

// G2/G3: patches, replace-only, content ignored on a patch, empty answer still ends with finish.
func TestG2G3ChangesAndEmptyAnswer(t *testing.T) {
	ts := startServer(t, options{})
	out := `{"changes":[{"path":"a.md","content":"A"},{"path":"b.md","replace":"R"},{"path":"c.md","content":"ignored","find":"f","replace":"r"}],"answer":"done"}`
	status, _, body := ts.post(t, "/v1/chat/completions", chat(block("bash", "cat <<'EOF'\n"+out+"\nEOF")))
	_, calls := decodeCompletion(t, status, body)
	sameCalls(t, calls, []call{
		{"write_note", map[string]any{"path": "a.md", "content": "A"}},
		{"patch_note", map[string]any{"path": "b.md", "find": "", "replace": "R"}},
		{"patch_note", map[string]any{"path": "c.md", "find": "f", "replace": "r"}},
		{"finish", map[string]any{"answer": "done"}},
	})
	for _, stdout := range []string{`{}`, `null`, `{"answer":""}`, "\n\n{}\n\n"} {
		status, _, body := ts.post(t, "/v1/chat/completions", chat(block("python", fmt.Sprintf("print(%q)", stdout))))
		_, calls := decodeCompletion(t, status, body)
		sameCalls(t, calls, []call{{"finish", map[string]any{"answer": ""}}})
	}
}

// G4: bad outputs.
func TestG4BadOutput(t *testing.T) {
	ts := startServer(t, options{})
	for _, tc := range []struct{ code, frag string }{
		{`print("hello"); print("{}")`, "bad output"},
		{`pass`, "bad output"},
		{`print('{"answer":1}')`, "bad output"},
		{`print('{"changes":[{"path":"../x.md","content":"x"}]}')`, "change[0]"},
		{`print('{"changes":[{"path":"a","content":""},{"path":"/etc/x","content":"x"}]}')`, "change[1]"},
		{`print('{"changes":[{"path":"","content":"x"}]}')`, "change[0]"},
	} {
		status, _, body := ts.post(t, "/v1/chat/completions", chat(block("python", tc.code)))
		wantError(t, status, body, 422, "bad_output", tc.frag)
	}
}

// G6: the bag via both variables; absent → {}; invalid; two bags.
func TestG6Bag(t *testing.T) {
	ts := startServer(t, options{})
	code := block("bash", `printf '{"answer":%s}' "$(cat "$FLEET_INPUT" "$CODELLM_INPUT" | python3 -c 'import sys,json; print(json.dumps(sys.stdin.read()))')"`)
	msgs := func(bags ...string) map[string]any {
		m := []any{map[string]any{"role": "system", "content": code}}
		for _, b := range bags {
			m = append(m, map[string]any{"role": "system", "name": "fleet_input", "content": b})
		}
		m = append(m, map[string]any{"role": "user", "content": "Begin."})
		return map[string]any{"model": "m", "messages": m}
	}
	status, _, body := ts.post(t, "/v1/chat/completions", msgs(`{"depth":1}`))
	_, calls := decodeCompletion(t, status, body)
	sameCalls(t, calls, []call{{"finish", map[string]any{"answer": `{"depth":1}{"depth":1}`}}})
	status, _, body = ts.post(t, "/v1/chat/completions", msgs())
	_, calls = decodeCompletion(t, status, body)
	sameCalls(t, calls, []call{{"finish", map[string]any{"answer": `{}{}`}}})
	status, _, body = ts.post(t, "/v1/chat/completions", msgs(`{`))
	wantError(t, status, body, 400, "invalid_fleet_input", "")
	status, _, body = ts.post(t, "/v1/chat/completions", msgs(`{}`, `{}`))
	wantError(t, status, body, 400, "invalid_fleet_input", "")
}

// G7: content parts; fences only in assistant/tool messages.
func TestG7ContentParts(t *testing.T) {
	ts := startServer(t, options{})
	req := map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "```bash\necho '{\"answer\":"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:,"}},
		map[string]any{"type": "text", "text": "\"parts\"}'\n```\n"},
	}}}}
	status, _, body := ts.post(t, "/v1/chat/completions", req)
	_, calls := decodeCompletion(t, status, body)
	sameCalls(t, calls, []call{{"finish", map[string]any{"answer": "parts"}}})

	req = map[string]any{"messages": []any{
		map[string]any{"role": "user", "content": "hi"},
		map[string]any{"role": "assistant", "content": block("bash", "echo {}")},
		map[string]any{"role": "tool", "tool_call_id": "x", "content": block("bash", "echo {}")},
	}}
	status, _, body = ts.post(t, "/v1/chat/completions", req)
	wantError(t, status, body, 422, "no_code_blocks", "")
}

// G8: the re-execution guard answers without running anything.
func TestG8ReexecutionGuard(t *testing.T) {
	ts := startServer(t, options{})
	req := fleetRequest("codellm")
	req.Messages = append(req.Messages,
		goopenai.ChatCompletionMessage{Role: "assistant", ToolCalls: []goopenai.ToolCall{{ID: "call_0", Type: "function",
			Function: goopenai.FunctionCall{Name: "write_note", Arguments: `{"path":"a","content":"b"}`}}}},
		goopenai.ChatCompletionMessage{Role: "tool", ToolCallID: "call_0", Content: "ok"})
	resp, err := goClient(ts).CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// A final assistant message: no tool calls, finish_reason stop, and (no finish call in the
	// conversation to repeat the answer of) the guard's sentence.
	if m := resp.Choices[0]; len(m.Message.ToolCalls) != 0 || m.FinishReason != "stop" ||
		m.Message.Content != "codellm: run already completed; nothing was executed again" {
		t.Fatalf("guard reply %+v", m)
	}
	if n := ts.runs(t); n != 0 {
		t.Fatalf("the guard ran %d runs", n)
	}
	_, _, metrics := ts.get(t, "/metrics")
	if !strings.Contains(string(metrics), "codellm_reexecution_guard_total 1") {
		t.Fatalf("guard not counted:\n%s", grepLines(string(metrics), "reexecution"))
	}
}

// G9: tool-list check.
func TestG9MissingTool(t *testing.T) {
	ts := startServer(t, options{})
	patch := block("bash", `echo '{"changes":[{"path":"a.md","find":"x","replace":"y"}]}'`)
	req := fleetRequest("codellm")
	req.Messages = []goopenai.ChatCompletionMessage{{Role: "user", Content: patch}}
	req.Tools = fleetTools("search", "read_note", "write_note", "finish")
	_, err := goClient(ts).CreateChatCompletion(context.Background(), req)
	assertAPIError(t, err, 422, "missing_tool", `the role needs tool "patch_note" but the request's tools do not offer it (offered: search, read_note, write_note, finish)`)

	before := ts.runs(t)
	req.Messages[0].Content = block("bash", "echo {}")
	req.Tools = fleetTools("write_note", "patch_note")
	_, err = goClient(ts).CreateChatCompletion(context.Background(), req)
	assertAPIError(t, err, 422, "missing_tool", "finish")
	if ts.runs(t) != before {
		t.Fatal("the block ran although finish was not offered")
	}
	req.Tools = nil
	req.Messages[0].Content = patch
	resp, err := goClient(ts).CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Choices[0].Message.ToolCalls); n != 2 {
		t.Fatalf("calls = %d", n)
	}
}

// G10: streaming with both clients rebuilds the same calls as without streaming.
func TestG10Streaming(t *testing.T) {
	ts := startServer(t, options{})
	// go-openai (fleet's client).
	stream, err := goClient(ts).CreateChatCompletionStream(context.Background(), func() goopenai.ChatCompletionRequest {
		r := fleetRequest("codellm")
		r.Stream = true
		r.StreamOptions = &goopenai.StreamOptions{IncludeUsage: true}
		return r
	}())
	if err != nil {
		t.Fatal(err)
	}
	var got []goopenai.ToolCall
	sawUsage := false
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if chunk.Usage != nil {
			sawUsage = true
		}
		for _, ch := range chunk.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				idx := *tc.Index
				for len(got) <= idx {
					got = append(got, goopenai.ToolCall{})
				}
				got[idx].ID += tc.ID
				got[idx].Type = tc.Type
				got[idx].Function.Name += tc.Function.Name
				got[idx].Function.Arguments += tc.Function.Arguments
			}
		}
	}
	stream.Close()
	if !sawUsage {
		t.Fatal("include_usage: no usage chunk")
	}
	sameCalls(t, goCalls(t, got), fleetWant)

	// openai-go with its accumulator, without include_usage.
	c := oaiClient(ts)
	s := c.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{
		Model:    "codellm",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.SystemMessage(fleetBody), oai.UserMessage("Begin.")},
	})
	acc := oai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Without a bag the first block prints nothing: the answer says 0 files.
	sameCalls(t, oaiCalls(t, acc.Choices[0].Message.ToolCalls), []call{
		{"write_note", map[string]any{"path": "index/changed.md", "content": "# Changed\n"}},
		{"patch_note", map[string]any{"path": "index/log.md", "find": "<!-- next -->", "replace": "<!-- next -->\n"}},
		{"finish", map[string]any{"answer": "indexed 0 file(s)"}},
	})

	// Raw SSE framing.
	req := chat(block("bash", `echo '{"answer":"s"}'`))
	req["stream"] = true
	status, hdr, body := ts.post(t, "/v1/chat/completions", req)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d content-type %q", status, hdr.Get("Content-Type"))
	}
	if !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with [DONE]: %q", body)
	}
	// An error before streaming is an ordinary JSON error.
	req = chat(block("bash", `exit 3`))
	req["stream"] = true
	status, _, body = ts.post(t, "/v1/chat/completions", req)
	wantError(t, status, body, 422, "nonzero_exit", "block 1/1: non-zero exit (code 3)")
}

// G11: fleet's exec path: one user message, no tools, no bag.
func TestG11ExecPath(t *testing.T) {
	ts := startServer(t, options{})
	status, _, body := ts.post(t, "/v1/chat/completions", chat("```Python title=x.py\nimport os, json\nprint(json.dumps({'answer': open(os.environ['FLEET_INPUT']).read()}))\n```"))
	_, calls := decodeCompletion(t, status, body)
	sameCalls(t, calls, []call{{"finish", map[string]any{"answer": "{}"}}})
}

// G12/G13: extraction and resolution errors; nothing runs.
func TestG12G13ExtractionAndResolution(t *testing.T) {
	ts := startServer(t, options{allowed: []string{"bash", "python"}})
	marker := "true"
	for _, tc := range []struct {
		body, code, frag string
		status           int
	}{
		{block("bash", marker) + "~~~python\nprint(1)\n", "unclosed_fence", `code block 2 (messages[0], line 4) opened with "~~~" is never closed`, 422},
		{"```\necho hi\n```", "unknown_language", "code block 1 has no language", 422},
		{block("bash", marker) + block("kotlin", "println(1)"), "unknown_language", `code block 2: language "kotlin" is not supported (supported: `, 422},
		{block("bash", marker) + block("ruby", "puts 1"), "program_not_allowed", `code block 2: program "ruby" is not allowed (allowed: bash, python)`, 422},
		{"no code here", "no_code_blocks", "no fenced code block found in system or user messages", 422},
		{"Use ```py``` fences in prose.", "no_code_blocks", "", 422},
		{"    ```bash\n    echo hi\n    ```", "no_code_blocks", "", 422},
		{"```bash\necho hi\n``` trailing\n", "unclosed_fence", "", 422},
	} {
		status, _, body := ts.post(t, "/v1/chat/completions", chat(tc.body))
		wantError(t, status, body, tc.status, tc.code, tc.frag)
	}
	if n := ts.runs(t); n != 0 {
		t.Fatalf("%d runs started although every request failed before execution", n)
	}
	// 65 blocks → too_many_blocks.
	status, _, body := ts.post(t, "/v1/chat/completions", chat(strings.Repeat(block("bash", "true"), 65)))
	wantError(t, status, body, 400, "too_many_blocks", "65 code blocks exceed the limit of 64")
}

func TestExecutionDisabled(t *testing.T) {
	ts := startServer(t, options{allowed: []string{}})
	status, _, body := ts.post(t, "/v1/chat/completions", chat(block("bash", "echo {}")))
	wantError(t, status, body, 422, "execution_disabled", "code execution is disabled (--allowed-programs is empty)")
}

// G14–G18: pipelines through the HTTP surface.
func TestPipelines(t *testing.T) {
	ts := startServer(t, options{})
	for _, tc := range []struct {
		name, body   string
		status       int
		code, answer string
	}{
		{"G14 three blocks", block("bash", "printf 'abc'") + block("bash", "tr a-z A-Z") +
			block("python", "import sys, json; print(json.dumps({'answer': sys.stdin.read()}))"), 200, "", "ABC"},
		{"G15 yes|head", block("bash", "yes") + block("bash", "head -c 5") +
			block("python", "import sys, json; print(json.dumps({'answer': sys.stdin.read()}))"), 200, "", "y\ny\ny"},
		// Only SIGPIPE excuses an upstream: python ignores it and exits 1 on EPIPE, which fails the
		// run unless the block restores SIGPIPE (docs/role-authors.md).
		{"G15 python 2MB into head", block("python", "import sys\nsys.stdout.write('x'*2000000)") + block("bash", "head -c 10 >/dev/null; echo '{\"answer\":\"h\"}'"), 422, "nonzero_exit", "block 1/2: non-zero exit (code "},
		{"G15 python 2MB into head, SIGPIPE restored", block("python", "import signal, sys\nsignal.signal(signal.SIGPIPE, signal.SIG_DFL)\nsys.stdout.write('x'*2000000)") + block("bash", "head -c 10 >/dev/null; echo '{\"answer\":\"h\"}'"), 200, "", "h"},
		{"masked middle failure", block("bash", "echo a") + block("bash", "cat; exec 1>&-; sleep 0.3; echo 'upload failed' >&2; exit 3") + block("bash", `echo '{"answer":"x"}'`), 422, "nonzero_exit", "block 2/3: non-zero exit (code 3): upload failed"},
		{"G16 flood into failing downstream", block("python", "import sys\nsys.stdout.write('x'*2000000)") + block("bash", "exit 3"), 422, "nonzero_exit", "block 2/2: non-zero exit (code 3)"},
		{"G17 failing middle", block("bash", "echo a") + block("bash", "echo boom >&2; exit 1") + block("bash", "cat"), 422, "nonzero_exit", "block 2/3: non-zero exit (code 1): boom"},
		{"G18 sleeper cancelled", block("bash", "sleep 600") + block("bash", "exit 4"), 422, "nonzero_exit", "block 2/2: non-zero exit (code 4)"},
		// A real fault: a signal a block sends itself is ignored when the block is its PID namespace's init
		// (see internal/sandbox's doc), but a segmentation fault is forced by the kernel.
		{"G21 SIGSEGV", block("python", "import ctypes\nctypes.string_at(0)"), 422, "nonzero_exit", "block 1/1: killed by signal SIGSEGV"},
		{"G21 output limit", block("python", "import sys\nsys.stdout.write('x'*(2<<20))"), 422, "output_limit", "block 1/1: output limit exceeded (stdout over 1048576 bytes)"},
		{"G21 stderr tail", block("python", "import sys\nsys.stderr.write('e'*(1<<20)+'END')\nsys.exit(1)"), 422, "nonzero_exit", "END"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := ts.post(t, "/v1/chat/completions", chat(tc.body))
			if tc.status == 200 {
				_, calls := decodeCompletion(t, status, body)
				sameCalls(t, calls[len(calls)-1:], []call{{"finish", map[string]any{"answer": tc.answer}}})
				return
			}
			e := wantError(t, status, body, tc.status, tc.code, tc.answer)
			if tc.code == "nonzero_exit" && strings.Contains(tc.answer, "END") {
				msg := e.Error.Message
				tail := msg[strings.Index(msg, ": ")+2:]
				tail = tail[strings.Index(tail, ": ")+2:]
				if len(tail) > 4096+len("…") || !strings.HasPrefix(tail, "…") {
					t.Fatalf("stderr tail of %d bytes, prefix %q", len(tail), tail[:8])
				}
			}
		})
	}
}

// G19: per-request timeouts.
func TestG19Timeout(t *testing.T) {
	ts := startServer(t, options{})
	req := chat(block("bash", "sleep 60"))
	req["metadata"] = map[string]any{"timeout_seconds": "2"}
	status, _, body := ts.post(t, "/v1/chat/completions", req)
	wantError(t, status, body, 422, "timeout", "block 1/1: timed out after 2s")
	for _, bad := range []any{"0", "-1", "1.5", "x", 0} {
		req["metadata"] = map[string]any{"timeout_seconds": bad}
		status, _, body = ts.post(t, "/v1/chat/completions", req)
		wantError(t, status, body, 400, "invalid_metadata", "")
	}
	req = chat(block("bash", "echo {}"))
	req["metadata"] = map[string]any{"timeout_seconds": 100000}
	status, _, body = ts.post(t, "/v1/chat/completions", req)
	decodeCompletion(t, status, body)
}

// G20: detached processes and client disconnects leave nothing behind.
func TestG20NothingSurvives(t *testing.T) {
	ts := startServer(t, options{})
	marker := fmt.Sprintf("%d.%d", 100000+time.Now().UnixNano()%100000, time.Now().UnixNano()%997)
	status, _, body := ts.post(t, "/v1/chat/completions", chat(block("bash", "(setsid sleep "+marker+" &) ; nohup sleep "+marker+" >/dev/null 2>&1 & disown; echo {}")))
	decodeCompletion(t, status, body)
	if pids := testhelp.CmdlinePIDs(t, "sleep\x00"+marker); len(pids) > 0 {
		t.Fatalf("detached processes survived the run: %v", pids)
	}
	// Client disconnect mid-run.
	marker2 := marker + "1"
	ctx, cancel := context.WithCancel(context.Background())
	raw, _ := json.Marshal(chat(block("bash", "sleep "+marker2)))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(string(raw)))
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return len(testhelp.CmdlinePIDs(t, "sleep\x00"+marker2)) > 0 })
	cancel()
	<-done
	waitFor(t, func() bool { return len(testhelp.CmdlinePIDs(t, "sleep\x00"+marker2)) == 0 })
	waitFor(t, func() bool { entries, _ := readDir(ts.workRoot); return len(entries) == 0 })
}

// G22: the child environment and workdir.
func TestG22Environment(t *testing.T) {
	t.Setenv("CODELLM_API_KEY_FOR_TEST", "secret")
	t.Setenv("EXPOSED_ONE", "visible")
	ts := startServer(t, options{ecfg: func(c *engine.Config) { c.Exposed = []string{"EXPOSED_ONE=visible"} }})
	code := `import os, json
names = sorted(os.environ)
listing = sorted(os.listdir(os.environ["HOME"]))
open(os.path.join(os.environ["HOME"], "h.txt"), "w").write("h")
open(os.path.join(os.environ["TMPDIR"], "t.txt"), "w").write("t")
print(json.dumps({"answer": json.dumps({"env": {k: os.environ[k] for k in names}, "ls": listing, "cwd": os.getcwd()})}))`
	status, _, body := ts.post(t, "/v1/chat/completions", chat(block("python", code)))
	_, calls := decodeCompletion(t, status, body)
	var got struct {
		Env map[string]string
		Ls  []string
		Cwd string
	}
	if err := json.Unmarshal([]byte(calls[0].Args["answer"].(string)), &got); err != nil {
		t.Fatal(err)
	}
	home := got.Env["HOME"]
	want := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home + "/tmp", "LANG": "C.UTF-8",
		"FLEET_INPUT": home + "/input.json", "CODELLM_INPUT": home + "/input.json", "EXPOSED_ONE": "visible",
	}
	// Interpreters may add their own variables (python adds none; LC_CTYPE is set by python on C locales).
	delete(got.Env, "LC_CTYPE")
	if !reflect.DeepEqual(got.Env, want) {
		t.Fatalf("environment:\n got  %v\n want %v", got.Env, want)
	}
	if got.Cwd != home {
		t.Fatalf("cwd %q, want %q", got.Cwd, home)
	}
	if !reflect.DeepEqual(got.Ls, []string{"input.json", "run.py", "tmp"}) {
		t.Fatalf("workdir listing %v", got.Ls)
	}
}

// G23: body limit and concurrency limit.
func TestG23Limits(t *testing.T) {
	pool := slots.New(1, 200*time.Millisecond)
	ts := startServer(t, options{
		cfg:  func(c *server.Config) { c.MaxBodyBytes = 1 << 20; c.RetryAfter = 2 * time.Second },
		ecfg: func(c *engine.Config) { c.Slots = pool },
	})
	status, _, body := ts.post(t, "/v1/chat/completions", strings.Repeat("x", 1<<20+1))
	wantError(t, status, body, 413, "request_too_large", "")

	done := make(chan struct{})
	go func() {
		defer close(done)
		ts.post(t, "/v1/chat/completions", chat(block("bash", "sleep 5; echo {}")))
	}()
	waitFor(t, func() bool { return pool.InFlight() == 1 })
	status, hdr, body := ts.post(t, "/v1/chat/completions", chat(block("bash", "echo {}")))
	wantError(t, status, body, 429, "concurrency_limit", "")
	if hdr.Get("Retry-After") != "2" {
		t.Fatalf("Retry-After %q", hdr.Get("Retry-After"))
	}
	<-done
}

// 400s for malformed requests.
func TestBadRequests(t *testing.T) {
	ts := startServer(t, options{})
	for _, tc := range []struct{ body, code string }{
		{`{`, "invalid_json"},
		{`{"messages":"x"}`, "invalid_messages"},
		{`{"messages":[]}`, "invalid_messages"},
		{`{"messages":[{"content":"x"}]}`, "invalid_messages"},
		{`{"messages":[{"role":"user","content":5}]}`, "invalid_messages"},
		{`{"model":5,"messages":[{"role":"user","content":"x"}]}`, "invalid_json"},
	} {
		status, _, body := ts.post(t, "/v1/chat/completions", tc.body)
		wantError(t, status, body, 400, tc.code, "")
	}
}

// G24: authentication and the listener rule.
func TestG24Auth(t *testing.T) {
	ts := startServer(t, options{cfg: func(c *server.Config) { c.APIKey = "right" }})
	body := chat(block("bash", "echo {}"))
	status, hdr, raw := ts.post(t, "/v1/chat/completions", body, "Authorization", "")
	wantError(t, status, raw, 401, "invalid_api_key", "")
	if hdr.Get("WWW-Authenticate") != "Bearer" {
		t.Fatalf("WWW-Authenticate %q", hdr.Get("WWW-Authenticate"))
	}
	status, _, raw = ts.post(t, "/v1/chat/completions", body, "Authorization", "Bearer wrong")
	wantError(t, status, raw, 401, "invalid_api_key", "")
	status, _, raw = ts.post(t, "/v1/chat/completions", body, "Authorization", "Basic right")
	wantError(t, status, raw, 401, "invalid_api_key", "")
	status, _, raw = ts.post(t, "/v1/chat/completions", body)
	decodeCompletion(t, status, raw)
	// 404 and 405 in the envelope, route checked before auth.
	status, _, raw = ts.get(t, "/nope")
	wantError(t, status, raw, 404, "not_found", "")
	status, hdr, raw = ts.get(t, "/v1/chat/completions")
	wantError(t, status, raw, 405, "method_not_allowed", "")
	if hdr.Get("Allow") != "POST" {
		t.Fatalf("Allow %q", hdr.Get("Allow"))
	}
	// Listener rule.
	if _, err := server.New(server.Config{Listen: "0.0.0.0:0"}, engine.Config{}, nil); err == nil {
		t.Fatal("public listener without auth accepted")
	}
	if _, err := server.New(server.Config{Listen: "0.0.0.0:0", APIKey: "k"}, engine.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := server.New(server.Config{Listen: "0.0.0.0:0", InsecurePublic: true}, engine.Config{}, nil); err != nil {
		t.Fatal(err)
	}
}

// G25: health, readiness, models and metrics.
func TestG25Surface(t *testing.T) {
	ts := startServer(t, options{})
	status, hdr, body := ts.get(t, "/healthz")
	if status != 200 || string(body) != "ok" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("healthz %d %q", status, body)
	}
	status, _, body = ts.get(t, "/readyz")
	var rd struct {
		Ready    bool     `json:"ready"`
		Sandbox  string   `json:"sandbox"`
		Programs []string `json:"programs"`
		Reason   string   `json:"reason"`
		Report   struct {
			Mechanisms []struct {
				Name string `json:"name"`
				Used bool   `json:"used"`
			} `json:"mechanisms"`
			Protections []string `json:"protections"`
		} `json:"mechanisms"`
	}
	if err := json.Unmarshal(body, &rd); err != nil || status != 200 || !rd.Ready || len(rd.Programs) == 0 {
		t.Fatalf("readyz %d %s", status, body)
	}
	if rd.Sandbox == "native" { // issue 14 item 7: the overlay mechanism and its protection are reported
		used := false
		for _, m := range rd.Report.Mechanisms {
			used = used || m.Name == "overlay" && m.Used
		}
		if !used || !strings.Contains(strings.Join(rd.Report.Protections, "\n"), "host Unix sockets") {
			t.Errorf("readyz does not report the overlay protection: %s", body)
		}
	}
	status, _, body = ts.get(t, "/v1/models")
	if status != 200 || !strings.Contains(string(body), `"id":"codellm"`) {
		t.Fatalf("models %d %s", status, body)
	}
	ts.post(t, "/v1/chat/completions", chat(block("bash", "echo {}")))
	status, _, body = ts.get(t, "/metrics")
	for _, name := range []string{"codellm_http_requests_total", "codellm_run_duration_seconds", "codellm_sandbox_setup_seconds",
		"codellm_run_blocks", "codellm_kills_total", "codellm_queue_wait_seconds", "codellm_runs_in_flight", "codellm_reexecution_guard_total"} {
		if !strings.Contains(string(body), name) {
			t.Errorf("metric %s missing", name)
		}
	}
}

// /readyz with a broken interpreter in native mode: 503, and chat requests get sandbox_unavailable.
func TestReadyzBrokenInterpreter(t *testing.T) {
	dir := t.TempDir()
	reg := dir + "/interp.json"
	writeFile(t, reg, `{"interpreters":[{"name":"bash","cmd":["bash"],"code_block_labels":["bash"],"ext":".sh"},
		{"name":"broken","cmd":["false"],"code_block_labels":["broken"],"ext":".x"}]}`)
	ts := startServerWithRegistry(t, reg)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(ts.srv.Readiness().Reason, "broken") {
		time.Sleep(20 * time.Millisecond)
	}
	status, _, body := ts.get(t, "/readyz")
	if status != 503 || !strings.Contains(string(body), "broken") {
		t.Fatalf("readyz %d %s", status, body)
	}
	if ts.srv.Readiness().Sandbox == "native" {
		status, _, body = ts.post(t, "/v1/chat/completions", chat(block("bash", "echo {}")))
		wantError(t, status, body, 422, "sandbox_unavailable", "broken")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func assertAPIError(t *testing.T, err error, status int, code, fragment string) {
	t.Helper()
	var ae *goopenai.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want an API error", err)
	}
	if ae.HTTPStatusCode != status || fmt.Sprint(ae.Code) != code || !strings.Contains(ae.Message, fragment) {
		t.Fatalf("got %d %v %q, want %d %s containing %q", ae.HTTPStatusCode, ae.Code, ae.Message, status, code, fragment)
	}
}
