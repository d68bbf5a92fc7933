package contract

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzParse checks the parser's total behaviour: any stdout yields either a *BadOutputError and no
// output, or calls ending in exactly one finish whose arguments are valid JSON carrying exactly the
// parsed fields. Plain `go test` runs the seed corpus.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"changes":[{"path":"a.md","content":"x"}],"answer":"ok"}`,
		`{"changes":[{"path":"b.md","find":"@todo","replace":"@done"},{"path":"c.md","replace":"r"}]}`,
		`{}`, `null`, `{"answer":""}`, "\n{\"answer\":\"x\"}\n\n",
		"print\n{}", "", `{"answer":1}`, `{"changes":[{"path":""}]}`, `{"changes":[{"path":"../x.md"}]}`,
		`{"changes":[{"path":"/etc/x"}]}`, `{"changes":[{"path":"a\u0000b"}]}`, `{}{}`, `[1,2]`,
		`{"changes":[{"path":"a.md","content":"<&>\u2028","find":null}],"answer":"\ud800"}`,
		"{\"answer\":\"\xff\xfe\"}", `{"changes":"x"}`, `{"changes":[null]}`, `{"answer":"a","answer":"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdout []byte) {
		out, err := Parse(stdout)
		if err != nil {
			var bad *BadOutputError
			if !errors.As(err, &bad) || !strings.HasPrefix(err.Error(), "bad output: ") {
				t.Fatalf("error %T %q is not a bad output error", err, err)
			}
			if out != nil {
				t.Fatalf("output %+v returned with error", out)
			}
			return
		}
		calls := out.ToolCalls()
		if len(calls) != len(out.Changes)+1 {
			t.Fatalf("%d calls for %d changes", len(calls), len(out.Changes))
		}
		for i, c := range calls {
			var args map[string]string
			if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
				t.Fatalf("call %d arguments %q are not a JSON object of strings: %v", i, c.Arguments, err)
			}
			if i == len(calls)-1 {
				if c.Name != ToolFinish || len(args) != 1 || args["answer"] != out.Answer {
					t.Fatalf("last call %+v is not finish(%q)", c, out.Answer)
				}
				continue
			}
			if c.Name == ToolFinish {
				t.Fatalf("finish at %d of %d", i, len(calls))
			}
			ch := out.Changes[i]
			if ch.Path == "" || !validPath(ch.Path) || args["path"] != ch.Path {
				t.Fatalf("call %d path %q (change %q)", i, args["path"], ch.Path)
			}
			if ch.Patch != (c.Name == ToolPatchNote) || (ch.Patch && (args["find"] != ch.Find || args["replace"] != ch.Replace)) ||
				(!ch.Patch && args["content"] != ch.Content) {
				t.Fatalf("call %d %+v does not render change %+v", i, c, ch)
			}
		}
	})
}

var benchStdout = []byte(`{"changes":[{"path":"index/changed.md","content":"# Changed\n` + strings.Repeat(`- [[notes/a.md]]\n`, 200) +
	`"},{"path":"index/log.md","find":"<!-- next -->","replace":"<!-- next -->\n- [[notes/a.md]]\n"}],"answer":"indexed 200 file(s)"}`)

func BenchmarkParse(b *testing.B) {
	b.SetBytes(int64(len(benchStdout)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(benchStdout); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseToolCalls(b *testing.B) {
	b.SetBytes(int64(len(benchStdout)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := Parse(benchStdout)
		if err != nil {
			b.Fatal(err)
		}
		_ = out.ToolCalls()
	}
}

// BenchmarkParseMaxOutput parses a stdout at the default --max-output-bytes (1 MiB): one large note
// and 1000 small changes, the worst case the service accepts.
func BenchmarkParseMaxOutput(b *testing.B) {
	var s strings.Builder
	s.WriteString(`{"changes":[{"path":"big.md","content":"`)
	s.WriteString(strings.Repeat(`line with \"quotes\" and unicode é\n`, 16000))
	s.WriteString(`"}`)
	for range 1000 {
		s.WriteString(`,{"path":"notes/n.md","find":"<!-- next -->","replace":"<!-- next -->\n- item"}`)
	}
	s.WriteString(`],"answer":"done"}`)
	stdout := []byte(s.String())
	b.SetBytes(int64(len(stdout)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := Parse(stdout)
		if err != nil {
			b.Fatal(err)
		}
		_ = out.ToolCalls()
	}
}
