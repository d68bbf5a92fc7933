package openai

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/bridge"
)

// treeSeeds are bodies where the tree and the bytes are easy to get apart: escapes, lone surrogates,
// duplicates, numbers past float64, the metadata value forms, and every refusal DecodeChatRequest has.
var treeSeeds = []string{
	`{"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m\ud800","messages":[{"role":"us\u0065r","name":"fleet_input","content":"a\udc00\ud83d\ude00\ud800\u0041"}]}`,
	`{"messages":"x","messages":[{"role":"user","content":[{"type":"te\u0078t","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}]}`,
	`{"messages":[{"role":"assistant","tool_calls":[{}]},{"role":"tool","tool_calls":null,"name":null,"content":null}]}`,
	`{"messages":[{"role":"user"}],"tools":[{"type":"function","function":{"name":"finish"}},{"type":"web"},{"function":null}]}`,
	`{"messages":[{"role":"user"}],"tools":[]}`, `{"messages":[{"role":"user"}],"tools":null,"stream":null,"model":null}`,
	`{"messages":[{"role":"user"}],"stream":true,"stream_options":{"include_usage":true},"x_codellm_debug":true}`,
	`{"messages":[{"role":"user"}],"metadata":{"timeout_seconds":1e2}}`, `{"messages":[{"role":"user"}],"metadata":{"timeout_seconds":1e400}}`,
	`{"messages":[{"role":"user"}],"metadata":{"timeout_seconds":99999999999}}`, `{"messages":[{"role":"user"}],"metadata":{"timeout_seconds":"99999999999999999999"}}`,
	`{"messages":[{"role":"user"}],"metadata":{"timeout_seconds":"007"}}`, `{"messages":[{"role":"user"}],"metadata":{"timeout_seconds":"0"}}`,
	`{"messages":[{"role":"user"}],"metadata":{"timeout_seconds":-0}}`, `{"messages":[{"role":"user"}],"metadata":{"timeout_seconds":0.5}}`,
	`{"messages":[{"role":"user"}],"metadata":{"network_allow":" a.example, ,b.example\ud800"}}`,
	`{"messages":[{"role":"user"}],"metadata":{"deterministic":"true","seed":"x","now":"2024-01-02T03:04:05.9+01:00"}}`,
	`{"messages":[{"role":"user"}],"metadata":{"deterministic":false,"seed":null,"now":"1704164645"}}`,
	`{"messages":[{"role":"user"}],"metadata":{"deterministic":"yes"}}`, `{"messages":[{"role":"user"}],"metadata":{"now":"99999999999999"}}`,
	`{"messages":[{"role":"user"}],"metadata":{"seed":42,"now":1704164645}}`,
	`{}`, `{"messages":[]}`, `{"messages":null}`, `{"messages":[1]}`, `{"messages":[{}]}`, `{"messages":[{"role":null}]}`,
	`{"messages":[{"role":"user","name":1}]}`, `{"messages":[{"role":"user","content":1}]}`,
	`{"messages":[{"role":"user","content":[{"type":null}]}]}`, `{"messages":[{"role":"user","content":[{"type":"text","text":null}]}]}`,
	`{"messages":[{"role":"user","tool_calls":1}]}`, `{"messages":[{"role":"user"}],"tools":[1]}`,
	`{"messages":[{"role":"user"}],"tools":[{"function":{"name":1}}]}`, `{"messages":[{"role":"user"}],"stream_options":[]}`,
	`{"messages":[{"role":"user"}],"metadata":[]}`, `{"messages":[{"role":"user"}],"metadata":{"network_allow":[]}}`,
	`{"Messages":[{"role":"user"}]}`,
}

// numericClock reports a body whose metadata.seed or metadata.now is a number: the one accepted shape
// ChatRequestFromTree leaves to the byte decoder, since the value is the number's text.
func numericClock(o *bridge.Object) bool {
	m, _ := o.Get("metadata")
	meta, _ := m.(*bridge.Object)
	seed, _ := meta.Get("seed")
	now, _ := meta.Get("now")
	_, a := seed.(float64)
	_, b := now.(float64)
	return a || b
}

// FuzzChatRequestFromTree is the converter's contract, differentially: on any body bridge parses, an ok
// result is exactly DecodeChatRequest's, a refusal by DecodeChatRequest is never ok, and every accepted
// body except a numeric seed/now is ok (the hub's fast path is really taken). Plain `go test` runs the seeds.
func FuzzChatRequestFromTree(f *testing.F) {
	files, _ := filepath.Glob("testdata/requests/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	for _, s := range treeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := bridge.ParseObject(body)
		if err != nil {
			return
		}
		got, ok := ChatRequestFromTree(o)
		want, e := DecodeChatRequest(body)
		switch {
		case e != nil && ok:
			t.Fatalf("DecodeChatRequest refuses (%s) but the tree gives %+v", e.Message, got)
		case e == nil && !ok && !numericClock(o):
			t.Fatalf("an accepted body is not ok from the tree: %+v", want)
		case ok && !reflect.DeepEqual(got, want):
			t.Fatalf("tree %+v\nbytes %+v", got, want)
		}
	})
}

func TestJSONString(t *testing.T) {
	for in, want := range map[string]string{"": "", "abc": "abc", "\xed\xa0\x80": "\ufffd", "a\xed\xbf\xbfb\xed\x9f\xbf": "a\ufffdb\ud7ff",
		"\xed\xa0\x80\xed\xb0\x80": "\ufffd\ufffd", strings.Repeat("é", 3): "ééé"} {
		if got := jsonString(in); got != want {
			t.Errorf("jsonString(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkChatRequestFromTree compares the typed request read from bytes (DecodeChatRequest) with the
// same request read from a tree the caller already holds (the hub's and the worker's case).
func BenchmarkChatRequestFromTree(b *testing.B) {
	msg := `{"role":"user","content":"run:\n` + "```python\\n" + strings.Repeat(`print(\"hi\")\n`, 80) + "```" + `"}`
	body := []byte(`{"model":"m","messages":[` + strings.Repeat(msg+",", 39) + msg + `],"metadata":{"timeout_seconds":"30"}}`)
	tree, err := bridge.ParseObject(body)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("bytes", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, e := DecodeChatRequest(body); e != nil {
				b.Fatal(e.Message)
			}
		}
	})
	b.Run("tree", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, ok := ChatRequestFromTree(tree); !ok {
				b.Fatal("declined")
			}
		}
	})
}
