package hub

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/openai"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/chat_golden.json from the current hub")

// goldenChatBodies are chat bodies whose hub answers (status, body) and assignment bytes are pinned in
// testdata/chat_golden.json: the early 400s with their exact messages (including encoding/json's texts for
// bad JSON), bodies only one of the two parsers accepts (invalid UTF-8, nesting past bridge's limit), and
// accepted bodies whose canonical assignment must keep the client's member order with stream forced off.
func goldenChatBodies() []struct{ name, body string } {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	deep := strings.Repeat("[", 600) + strings.Repeat("]", 600)
	return []struct{ name, body string }{
		{"not-json", `not json`}, {"empty", ``}, {"null", `null`}, {"array", `[]`}, {"string", `"x"`},
		{"truncated", `{"messages":[`}, {"trailing", `{` + msgs + `} x`},
		{"messages-missing", `{}`}, {"messages-string", `{"messages":"nope"}`}, {"messages-empty", `{"messages":[]}`},
		{"message-number", `{"messages":[1]}`}, {"role-missing", `{"messages":[{}]}`},
		{"role-number", `{"messages":[{"role":1}]}`}, {"name-number", `{"messages":[{"role":"user","name":5}]}`},
		{"content-number", `{"messages":[{"role":"user","content":5}]}`},
		{"part-string", `{"messages":[{"role":"user","content":["x"]}]}`},
		{"part-type-missing", `{"messages":[{"role":"user","content":[{}]}]}`},
		{"part-text-missing", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`},
		{"part-text-number", `{"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`},
		{"tool-calls-object", `{"messages":[{"role":"assistant","tool_calls":{}}]}`},
		{"model-number", `{"model":5,` + msgs + `}`}, {"stream-string", `{"stream":"yes",` + msgs + `}`},
		{"stream-options-number", `{"stream_options":1,` + msgs + `}`},
		{"include-usage-string", `{"stream_options":{"include_usage":"x"},` + msgs + `}`},
		{"debug-number", `{"x_codellm_debug":1,` + msgs + `}`},
		{"tools-object", `{"tools":{},` + msgs + `}`}, {"tool-number", `{"tools":[1],` + msgs + `}`},
		{"tool-function-number", `{"tools":[{"type":"function","function":1}],` + msgs + `}`},
		{"metadata-number", `{"metadata":1,` + msgs + `}`},
		{"timeout-negative", `{"metadata":{"timeout_seconds":-1},` + msgs + `}`},
		{"timeout-fraction", `{"metadata":{"timeout_seconds":1.50},` + msgs + `}`},
		{"timeout-huge", `{"metadata":{"timeout_seconds":1e400},` + msgs + `}`},
		{"timeout-string-sign", `{"metadata":{"timeout_seconds":"-5"},` + msgs + `}`},
		{"timeout-object", `{"metadata":{"timeout_seconds":{"a": 1}},` + msgs + `}`},
		{"network-allow-number", `{"metadata":{"network_allow":5},` + msgs + `}`},
		{"network-allow-bad-host", `{"metadata":{"network_allow":"bad host!"},` + msgs + `}`},
		{"deterministic-number", `{"metadata":{"deterministic":1},` + msgs + `}`},
		{"seed-bool", `{"metadata":{"seed":true},` + msgs + `}`},
		{"now-fraction", `{"metadata":{"now":1.5},` + msgs + `}`},
		{"bag-twice", `{"messages":[{"role":"user","name":"fleet_input","content":"{}"},{"role":"user","name":"fleet_input","content":"{}"}]}`},
		{"invalid-utf8", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"},
		{"too-deep", `{"x":` + deep + `,` + msgs + `}`},
		{"ok-plain", `{"model":"codellm",` + msgs + `}`},
		{"ok-order", `{"z":1,` + msgs + `,"a":{"y":[1,2.50,1e400,"\u00e9"],"b":null},"stream":true,"model":"codellm"}`},
		{"ok-duplicates", `{"messages":"nope","model":"x",` + msgs + `,"model":"codellm"}`},
		{"ok-surrogate", `{"model":"codellm","messages":[{"role":"user","content":"a\ud800b\ud83d\ude00"}]}`},
		{"ok-parts-tools", `{"model":"codellm","messages":[{"role":"system","content":null},{"role":"user","content":[{"type":"image_url"},{"type":"text","text":"x"}]}],"tools":[{"type":"function","function":{"name":"finish"}},{"type":"web"}],"tool_choice":"auto"}`},
		{"ok-metadata", `{"model":"codellm",` + msgs + `,"metadata":{"timeout_seconds":"30","network_allow":"example.com, b.example","deterministic":true,"seed":"7","now":"2024-01-02T03:04:05Z"}}`},
		{"ok-metadata-numbers", `{"model":"codellm",` + msgs + `,"metadata":{"timeout_seconds":1e2,"seed":4.20,"now":1704164645}}`},
		{"ok-stream-usage", `{"model":"codellm","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`},
	}
}

type goldenChat struct {
	Name       string `json:"name"`
	Status     int    `json:"status"`
	Body       string `json:"body"`
	Assignment string `json:"assignment,omitempty"`
}

// TestChatGolden pins the hub's chat answers and assignment bytes, so that the way the hub decodes a chat
// body can change without changing a byte on either wire (issue 15 item 3: decode once per hop).
func TestChatGolden(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "chat")
	w.caps.Runtimes = append(w.caps.Runtimes, ChatRuntimeLabel)
	w.pair(h)
	w.mustRegister()
	seen := make(chan string, 1)
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		req, _ := a.Request.Canonical()
		seen <- string(req)
		return fulfilled(a, w.incarnation, completion)
	})
	defer stop()
	var got []goldenChat
	for _, c := range goldenChatBodies() {
		r := h.client(t, "/v1/chat/completions", c.body, nil)
		g := goldenChat{Name: c.name, Status: r.status, Body: string(r.body)}
		if r.status == 200 {
			g.Assignment = <-seen
		}
		got = append(got, g)
	}
	b, _ := json.MarshalIndent(got, "", "  ")
	b = append(b, '\n')
	const path = "testdata/chat_golden.json"
	if *updateGolden {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		var wl []goldenChat
		_ = json.Unmarshal(want, &wl)
		for i := range got {
			if i >= len(wl) || got[i] != wl[i] {
				t.Errorf("case %d differs:\n got %+v", i, got[i])
				if i < len(wl) {
					t.Errorf("want %+v", wl[i])
				}
			}
		}
		if len(wl) != len(got) {
			t.Errorf("%d cases, golden file has %d", len(got), len(wl))
		}
	}
}

// TestChatDecodedOnce counts the hub's parses of a chat body (issue 15 item 3): an accepted body is parsed
// once, into bridge's tree, and never by the byte decoder; a refusal costs the byte decoder one more
// parse for its message; a numeric metadata.seed/now, whose value is the number's text, also goes to the
// byte decoder. Before the change every body was parsed twice (DecodeChatRequest, then ParseObject).
func TestChatDecodedOnce(t *testing.T) {
	var trees, decodes int
	parseTree, decodeBytes := parseChatTree, decodeChatBytes
	parseChatTree = func(b []byte) (*bridge.Object, error) { trees++; return parseTree(b) }
	decodeChatBytes = func(b []byte) (*openai.ChatRequest, *openai.Error) { decodes++; return decodeBytes(b) }
	defer func() { parseChatTree, decodeChatBytes = parseTree, decodeBytes }()
	for _, c := range goldenChatBodies() {
		trees, decodes = 0, 0
		req, body, oe := decodeChat([]byte(c.body))
		want := [2]int{1, 0}
		switch {
		case oe != nil:
			want[1] = 1
		case c.name == "ok-metadata-numbers":
			want[1] = 1 // seed 4.20 is "4.20" to DecodeChatRequest; the tree has only 4.2
		}
		if got := [2]int{trees, decodes}; got != want {
			t.Errorf("%s: %d tree parses and %d byte decodes, want %v", c.name, trees, decodes, want)
		}
		if oe == nil && (req == nil || body == nil) {
			t.Errorf("%s: accepted without a request or a body", c.name)
		}
	}
}

// benchChatBody is a mid-size conversation: 20 turns with a code block each, tools and metadata.
func benchChatBody() []byte {
	var b strings.Builder
	b.WriteString(`{"model":"codellm","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"You run code."}`)
	for i := 0; i < 20; i++ {
		b.WriteString(`,{"role":"user","content":"run this:\n` + "```python\\n" + strings.Repeat(`print(\"hello, world\")\n`, 40) + "```" + `"}`)
		b.WriteString(`,{"role":"assistant","content":[{"type":"text","text":"` + strings.Repeat("ok ", 100) + `"}]}`)
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"finish","parameters":{"type":"object"}}}],"metadata":{"timeout_seconds":"30"}}`)
	return []byte(b.String())
}

// BenchmarkChatDecode compares the hub's decode of one chat body before (DecodeChatRequest, then
// bridge.ParseObject) and after (decodeChat: one tree parse and the tree converter).
func BenchmarkChatDecode(b *testing.B) {
	body := benchChatBody()
	b.Run("twice", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, e := openai.DecodeChatRequest(body); e != nil {
				b.Fatal(e.Message)
			}
			if _, err := bridge.ParseObject(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("once", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, _, e := decodeChat(body); e != nil {
				b.Fatal(e.Message)
			}
		}
	})
}
