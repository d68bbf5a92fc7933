package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/codellm/codellm/internal/contract"
)

const (
	specID      = "codellm-5b0e9d2c41f7a3e86c1d0b94" // the §15.3 reply's id
	specCreated = 1752480000
)

// fleetCalls runs the output contract on the worked example's block-2 stdout (§15.3).
func fleetCalls(t testing.TB) []ToolCall {
	t.Helper()
	stdout, err := os.ReadFile("testdata/responses/fleet_15_3.stdout")
	if err != nil {
		t.Fatal(err)
	}
	out, err := contract.Parse(stdout)
	if err != nil {
		t.Fatal(err)
	}
	return out.ToolCalls()
}

func parseJSON(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return v
}

// argsOf parses every call's arguments, because §10.1 says clients must not rely on key order.
func argsOf(t *testing.T, v any) {
	t.Helper()
	calls := v.(map[string]any)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["tool_calls"].([]any)
	for _, c := range calls {
		fn := c.(map[string]any)["function"].(map[string]any)
		fn["arguments"] = parseJSON(t, []byte(fn["arguments"].(string)))
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCompletionMatchesSpec compares the replies of §15.3 and §10.1 with the spec's text, parsed and
// with parsed arguments, and pins the exact bytes in a golden file.
func TestCompletionMatchesSpec(t *testing.T) {
	got := Completion(specID, specCreated, "codellm", fleetCalls(t), nil)
	compareGolden(t, "testdata/responses/fleet_15_3.completion.json", append(got, '\n'))
	g, w := parseJSON(t, got), parseJSON(t, readFile(t, "testdata/responses/fleet_15_3.spec_reply.json"))
	argsOf(t, g)
	argsOf(t, w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("§15.3 reply differs:\n got %v\nwant %v", g, w)
	}

	out, err := contract.Parse([]byte(`{"changes":[{"path":"notes/a.md","content":"hello\n"},{"path":"boards/s.md","find":"@todo","replace":"@done"}],"answer":"done"}`))
	if err != nil {
		t.Fatal(err)
	}
	got = Completion("codellm-9f2c4e1a7b3d5c6e8f0a1b2c", specCreated, "", out.ToolCalls(), nil)
	g, w = parseJSON(t, got), parseJSON(t, readFile(t, "testdata/responses/completion_10_1.spec_reply.json"))
	argsOf(t, g)
	argsOf(t, w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("§10.1 reply differs:\n got %v\nwant %v", g, w)
	}
}

func TestCompletionModelEcho(t *testing.T) {
	calls := fleetCalls(t)
	for model, want := range map[string]string{"gpt-x": "gpt-x", "": "codellm", "codellm": "codellm"} {
		var v struct{ Model string }
		if err := json.Unmarshal(Completion(specID, 1, model, calls, nil), &v); err != nil || v.Model != want {
			t.Errorf("model %q echoed as %q (%v), want %q", model, v.Model, err, want)
		}
	}
}

// The re-execution guard's reply is a final assistant message: content, no tool_calls member,
// finish_reason "stop" — streamed as OpenAI streams text, and parsed back (the hub re-encodes it).
func TestTextReply(t *testing.T) {
	text := "indexed 2 file(s) <&>"
	r := &Reply{ID: specID, Created: specCreated, Model: "codellm", Text: &text}
	got := r.Completion()
	compareGolden(t, "testdata/responses/guard.completion.json", append(got, '\n'))
	want := `"message":{"role":"assistant","content":"indexed 2 file(s) <&>"},"finish_reason":"stop"`
	if !bytes.Contains(got, []byte(want)) || bytes.Contains(got, []byte("tool_calls")) {
		t.Errorf("text reply %s lacks %s or has tool calls", got, want)
	}
	back, err := ParseCompletion(got)
	if err != nil || back.Text == nil || *back.Text != text || len(back.Calls) != 0 || !bytes.Equal(back.Completion(), got) {
		t.Fatalf("parsed back %+v, %v", back, err)
	}
	big := strings.Repeat("é€😀", 3000) // 27 KB: several content fragments
	r.Text = &big
	events := sseEvents(t, r.Stream(true))
	chunks := parseChunks(t, events, "codellm")
	if !strings.Contains(events[0], `"delta":{"role":"assistant","content":""}`) {
		t.Errorf("role chunk: %s", events[0])
	}
	var rebuilt string
	for i, c := range chunks[1 : len(chunks)-2] {
		d := c.Choices[0].Delta
		if d.Content == nil || len(d.ToolCalls) != 0 || c.Choices[0].FinishReason != nil || len(*d.Content) > FragmentBytes {
			t.Fatalf("content chunk %d: %s", i+1, events[i+1])
		}
		rebuilt += *d.Content
	}
	fin := chunks[len(chunks)-2].Choices[0]
	if rebuilt != big || len(chunks) < 5 || fin.FinishReason == nil || *fin.FinishReason != "stop" || events[len(events)-1] != "[DONE]" {
		t.Fatalf("%d chunks rebuilt %d bytes of %d; finish %v", len(chunks), len(rebuilt), len(big), fin.FinishReason)
	}
}

func TestNoHTMLEscaping(t *testing.T) {
	out, err := contract.Parse([]byte(`{"changes":[{"path":"a.md","content":"<b>&amp;</b>"}],"answer":"<&>"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range [][]byte{
		Completion(specID, 1, "m<&>", out.ToolCalls(), nil),
		Stream(specID, 1, "m<&>", out.ToolCalls(), true, map[string]any{"x_codellm_debug": map[string]any{"stdout": "<&>"}}),
	} {
		if bytes.Contains(body, []byte(`\u003c`)) || bytes.Contains(body, []byte(`\u0026`)) ||
			!bytes.Contains(body, []byte(`<b>&amp;</b>`)) || !bytes.Contains(body, []byte(`"m<&>"`)) {
			t.Errorf("HTML-escaped or mangled: %s", body)
		}
	}
	rec := httptest.NewRecorder()
	WriteJSON(rec, http.StatusCreated, map[string]string{"a": "<&>"})
	if rec.Code != 201 || rec.Body.String() != "{\"a\":\"<&>\"}\n" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("WriteJSON: %d %q %v", rec.Code, rec.Body, rec.Header())
	}
	rec = httptest.NewRecorder()
	WriteJSON(rec, http.StatusOK, map[string]any{"f": func() {}})
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"code":"internal_error"`) {
		t.Errorf("unencodable value: %d %s", rec.Code, rec.Body)
	}
}

// debugExtra is a §13 object with one non-UTF-8 byte field, as the server would build it.
func debugExtra() map[string]any {
	b0 := map[string]any{"index": 0, "lang": "bash", "program": "bash", "outcome": "ok", "exit_code": 0, "signal": nil,
		"duration_ms": 8, "max_rss_bytes": 3407872}
	PutBytes(b0, "stdout", []byte("a\xffb\n"))
	PutBytes(b0, "stderr", nil)
	PutBytes(b0, "pipe_buffer", []byte("a\xffb\n"))
	b1 := map[string]any{"index": 1, "lang": "python", "program": "python", "outcome": "ok", "exit_code": 0, "signal": nil,
		"duration_ms": 41, "max_rss_bytes": 9412608}
	PutBytes(b1, "stdout", []byte("{\"answer\":\"2\"}\n"))
	PutBytes(b1, "stderr", nil)
	PutBytes(b1, "pipe_buffer", nil)
	return map[string]any{"x_codellm_debug": map[string]any{"blocks": []any{b0, b1}}}
}

func TestCompletionDebugExtra(t *testing.T) {
	got := Completion(specID, specCreated, "codellm", fleetCalls(t), debugExtra())
	compareGolden(t, "testdata/responses/debug.completion.json", append(got, '\n'))
	var v struct {
		Choices []any `json:"choices"`
		Debug   struct {
			Blocks []map[string]any `json:"blocks"`
		} `json:"x_codellm_debug"`
	}
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Choices) != 1 || len(v.Debug.Blocks) != 2 || v.Debug.Blocks[0]["stdout"] != "a\uFFFDb\n" ||
		v.Debug.Blocks[0]["stdout_base64"] != "Yf9iCg==" || v.Debug.Blocks[1]["stdout_base64"] != nil {
		t.Errorf("debug object wrong: %s", got)
	}
	// Reserved keys never shadow the standard fields.
	got = Completion(specID, specCreated, "codellm", fleetCalls(t), map[string]any{"id": "evil", "choices": nil})
	if !bytes.Equal(got, Completion(specID, specCreated, "codellm", fleetCalls(t), nil)) {
		t.Errorf("reserved extra keys were merged: %s", got)
	}
}

// sseEvents splits an SSE body into its data payloads, failing on anything that is not a
// "data: …\n\n" event.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	var events []string
	for ev := range strings.SplitSeq(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		events = append(events, data)
	}
	return events
}

type wireChunk struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Index int `json:"index"`
		Delta struct {
			Role      *string `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     *int `json:"prompt_tokens"`
		CompletionTokens *int `json:"completion_tokens"`
		TotalTokens      *int `json:"total_tokens"`
	} `json:"usage"`
	Debug json.RawMessage `json:"x_codellm_debug"`
}

// TestStreamParsedBack parses streams chunk by chunk and checks the §10.3 sequence.
func TestStreamParsedBack(t *testing.T) {
	calls := fleetCalls(t)
	for _, tc := range []struct {
		name         string
		includeUsage bool
		extra        map[string]any
		golden       string
	}{
		{"plain", false, nil, "fleet_15_3.stream.txt"},
		{"include_usage", true, nil, "fleet_15_3.stream_usage.txt"},
		{"debug", true, debugExtra(), "debug.stream.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := Stream(specID, specCreated, "gpt-x", calls, tc.includeUsage, tc.extra)
			compareGolden(t, "testdata/responses/"+tc.golden, body)
			events := sseEvents(t, body)
			chunks := parseChunks(t, events, "gpt-x")
			// 1. role chunk: content null, as OpenAI sends it beside tool calls
			first := chunks[0]
			if len(first.Choices) != 1 || first.Choices[0].Delta.Role == nil || *first.Choices[0].Delta.Role != "assistant" ||
				!strings.Contains(events[0], `"delta":{"role":"assistant","content":null}`) || first.Choices[0].FinishReason != nil {
				t.Errorf("role chunk: %s", events[0])
			}
			// 2. per call: a head delta, then argument fragments that reassemble to the exact arguments
			got, next := reassemble(t, events, chunks)
			if !reflect.DeepEqual(got, calls) {
				t.Errorf("reassembled calls %+v, want %+v", got, calls)
			}
			if next != 1+len(calls)*2 {
				t.Errorf("small calls took %d chunks, want one head and one fragment each", next-1)
			}
			want := next + 2
			if tc.includeUsage {
				want++
			}
			if len(events) != want || events[len(events)-1] != "[DONE]" {
				t.Fatalf("%d events (want %d), last %q", len(events), want, events[len(events)-1])
			}
			// 3. finish chunk, carrying the debug object when present
			fin := chunks[next]
			if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == nil || *fin.Choices[0].FinishReason != "tool_calls" ||
				!strings.Contains(events[next], `"delta":{}`) {
				t.Errorf("finish chunk: %s", events[next])
			}
			if (tc.extra != nil) != (fin.Debug != nil) {
				t.Errorf("x_codellm_debug on the finish chunk: %s", fin.Debug)
			}
			for i, c := range chunks {
				if i != next && c.Debug != nil {
					t.Errorf("x_codellm_debug on chunk %d", i)
				}
				if i < len(chunks)-1 || !tc.includeUsage {
					if c.Usage != nil {
						t.Errorf("usage on chunk %d", i)
					}
					// OpenAI's shape: logprobs null on every choice; usage null on every chunk but the last
					// when include_usage was asked for, absent otherwise.
					if !strings.Contains(events[i], `"logprobs":null,"finish_reason"`) ||
						strings.Contains(events[i], `"usage":null`) != tc.includeUsage {
						t.Errorf("chunk %d lacks logprobs:null or has the wrong usage member: %s", i, events[i])
					}
				}
			}
			// 4. usage chunk: empty choices, zero usage
			if tc.includeUsage {
				u := chunks[len(chunks)-1]
				if !strings.Contains(events[len(events)-2], `"choices":[]`) || u.Usage == nil || u.Usage.PromptTokens == nil ||
					*u.Usage.PromptTokens != 0 || *u.Usage.CompletionTokens != 0 || *u.Usage.TotalTokens != 0 {
					t.Errorf("usage chunk: %s", events[len(events)-2])
				}
			}
		})
	}
}

func TestWriteStream(t *testing.T) {
	rec := httptest.NewRecorder()
	calls := fleetCalls(t)
	if err := WriteStream(rec, specID, specCreated, "codellm", calls, false, nil); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" || !rec.Flushed {
		t.Errorf("status %d, headers %v, flushed %v", rec.Code, rec.Header(), rec.Flushed)
	}
	if !bytes.Equal(rec.Body.Bytes(), Stream(specID, specCreated, "codellm", calls, false, nil)) {
		t.Errorf("WriteStream body differs from Stream")
	}
	// A line-oriented SSE reader sees the same events.
	sc := bufio.NewScanner(bytes.NewReader(rec.Body.Bytes()))
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		} else if sc.Text() != "" {
			t.Errorf("unexpected line %q", sc.Text())
		}
	}
	if n != 2*len(calls)+3 {
		t.Errorf("%d data lines, want %d", n, 2*len(calls)+3)
	}
}

func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^codellm-[0-9a-f]{24}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if !re.MatchString(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
}

func TestModels(t *testing.T) {
	want := `{"object":"list","data":[{"id":"codellm","object":"model","created":0,"owned_by":"codellm"}]}`
	if got := Models(); string(got) != want {
		t.Errorf("Models() = %s", got)
	}
	Models()[0] = 'x' // callers cannot corrupt the shared body
	if string(Models()) != want {
		t.Error("Models body was mutated through a returned slice")
	}
}

func TestPutBytes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		text    string
		base64  string
		present bool
	}{
		{"", "", "", false},
		{"héllo\n", "héllo\n", "", false},
		{"a\xffb", "a\uFFFDb", "Yf9i", true},
		{"\xe2\x82", "\uFFFD\uFFFD", "4oI=", true}, // truncated 3-byte sequence: one U+FFFD per invalid byte
		{"x\x00y", "x\x00y", "", false},
	} {
		m := map[string]any{"stdout_base64": "stale"}
		PutBytes(m, "stdout", []byte(tc.in))
		b64, ok := m["stdout_base64"]
		if m["stdout"] != tc.text || ok != tc.present || (ok && b64 != tc.base64) {
			t.Errorf("PutBytes(%q) = %q, %q (%v)", tc.in, m["stdout"], b64, ok)
		}
		// The JSON string round-trips to the replaced text.
		var back map[string]string
		if err := json.Unmarshal(marshal(m), &back); err != nil || back["stdout"] != tc.text {
			t.Errorf("PutBytes(%q) JSON round trip: %v %q", tc.in, err, back["stdout"])
		}
	}
}

// parseChunks decodes every event but [DONE] and checks the chunk header.
func parseChunks(t *testing.T, events []string, model string) []wireChunk {
	t.Helper()
	var chunks []wireChunk
	for i, ev := range events[:len(events)-1] {
		var c wireChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if c.ID != specID || c.Object != "chat.completion.chunk" || c.Created != specCreated || c.Model != model ||
			c.SystemFingerprint != SystemFingerprint {
			t.Errorf("event %d header: %+v", i, c)
		}
		chunks = append(chunks, c)
	}
	return chunks
}

// reassemble rebuilds the calls from the tool-call deltas after the role chunk the way OpenAI's SDKs do
// (the head delta starts a call, later deltas append arguments) and checks each delta's shape. It returns
// the calls and the index of the first chunk after them.
func reassemble(t *testing.T, events []string, chunks []wireChunk) ([]ToolCall, int) {
	t.Helper()
	var calls []ToolCall
	i := 1
	for ; i < len(chunks) && len(chunks[i].Choices) == 1 && len(chunks[i].Choices[0].Delta.ToolCalls) > 0; i++ {
		ch := chunks[i].Choices[0]
		if len(ch.Delta.ToolCalls) != 1 || ch.FinishReason != nil || ch.Delta.Content != nil {
			t.Fatalf("call chunk %d: %s", i, events[i])
		}
		d := ch.Delta.ToolCalls[0]
		switch {
		case d.ID != "": // head
			if d.Index != len(calls) || d.Type != "function" || d.Function.Name == "" || d.Function.Arguments != "" ||
				!strings.Contains(events[i], `"arguments":""`) {
				t.Fatalf("head delta %d: %s", i, events[i])
			}
			calls = append(calls, ToolCall{ID: d.ID, Name: d.Function.Name})
		case len(calls) == 0 || d.Index != len(calls)-1 || d.Type != "" || d.Function.Name != "" || d.Function.Arguments == "":
			t.Fatalf("fragment delta %d: %s", i, events[i])
		default:
			calls[len(calls)-1].Arguments += d.Function.Arguments
		}
	}
	return calls, i
}

// TestStreamFragments streams a large answer full of characters JSON escaping doubles and checks that
// no SSE line exceeds MaxSSELine, that the arguments come in several fragments and reassemble exactly.
func TestStreamFragments(t *testing.T) {
	big := strings.Repeat(`"\\ \u2028 é€😀 <&>`, 12000) // ~250 KiB of content
	out, err := contract.Parse(marshal(map[string]any{
		"changes": []any{map[string]string{"path": "a.md", "content": big}}, "answer": big}))
	if err != nil {
		t.Fatal(err)
	}
	calls := WithCallIDs(out.ToolCalls())
	body := Stream(specID, specCreated, "m", calls, false, nil)
	for line := range strings.SplitSeq(string(body), "\n") {
		if len(line) > MaxSSELine {
			t.Fatalf("SSE line of %d bytes > %d", len(line), MaxSSELine)
		}
	}
	events := sseEvents(t, body)
	got, next := reassemble(t, events, parseChunks(t, events, "m"))
	if !reflect.DeepEqual(got, calls) {
		t.Fatal("reassembled calls differ from the originals")
	}
	if next < 100 {
		t.Errorf("only %d chunks for ~1 MiB of arguments", next)
	}
}

func TestFragments(t *testing.T) {
	for _, s := range []string{"", "a", "héllo wörld", strings.Repeat("€", 1000), strings.Repeat("ab😀", 777)} {
		for _, n := range []int{4, 5, 7, 64, 4096} {
			parts := Fragments(s, n)
			if strings.Join(parts, "") != s {
				t.Fatalf("Fragments(%q, %d) lose bytes", s, n)
			}
			for _, p := range parts {
				if len(p) > n || (len(parts) > 1 && !utf8.ValidString(p)) {
					t.Fatalf("Fragments(%d) piece %q", n, p)
				}
			}
		}
	}
}

func TestCallIDs(t *testing.T) {
	re := regexp.MustCompile(`^call_[A-Za-z0-9]{24}$`)
	seen := map[string]bool{}
	calls := fleetCalls(t)
	for range 200 {
		got := WithCallIDs(calls)
		for i, c := range got {
			if !re.MatchString(c.ID) || seen[c.ID] || c.Name != calls[i].Name || c.Arguments != calls[i].Arguments {
				t.Fatalf("call %d: %+v", i, c)
			}
			seen[c.ID] = true
		}
	}
	if calls[0].ID != "call_0" {
		t.Error("WithCallIDs changed its argument")
	}
}

func TestModel(t *testing.T) {
	if b, e := Model("codellm"); e != nil || string(b) != `{"id":"codellm","object":"model","created":0,"owned_by":"codellm"}` {
		t.Errorf("Model(codellm) = %s, %v", b, e)
	}
	if _, e := Model("gpt-4o"); e == nil || e.Status != 404 || e.Code != "model_not_found" || e.Type() != "invalid_request_error" {
		t.Errorf("Model(gpt-4o) error = %+v", e)
	}
}
