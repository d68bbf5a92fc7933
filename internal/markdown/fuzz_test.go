package markdown

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// The reference extractor below is a deliberately naive second reading of contract §3.1 (whole-text
// normalisation, split into lines, regular expressions). FuzzExtract checks the fast extractor against
// it, so a shortcut in the fast path (substring reuse, in-place line trimming) cannot drift unnoticed.

var (
	refOpen  = regexp.MustCompile("^( {0,3})(`{3,}|~{3,})(.*)$")
	refClose = regexp.MustCompile("^ {0,3}(`+|~+)[ \t]*$")
)

func refNormalize(s string) string {
	for strings.Contains(s, "\r\n") {
		s = strings.ReplaceAll(s, "\r\n", "\n")
	}
	return s
}

func refExtract(sources []Source) ([]Block, error) {
	var out []Block
	for _, src := range sources {
		text := refNormalize(src.Text)
		lines := strings.Split(text, "\n")
		if strings.HasSuffix(text, "\n") {
			lines = lines[:len(lines)-1]
		}
		if text == "" {
			lines = nil
		}
		for i := 0; i < len(lines); i++ {
			m := refOpen.FindStringSubmatch(lines[i])
			if m == nil || (m[2][0] == '`' && strings.Contains(m[3], "`")) {
				continue
			}
			indent, fence := len(m[1]), m[2]
			info := strings.Trim(m[3], " \t\v\f\r")
			strip := regexp.MustCompile("^ {0," + string(rune('0'+indent)) + "}")
			var code strings.Builder
			j := i + 1
			for ; j < len(lines); j++ {
				c := refClose.FindStringSubmatch(lines[j])
				if c != nil && c[1][0] == fence[0] && len(c[1]) >= len(fence) {
					break
				}
				code.WriteString(strip.ReplaceAllString(lines[j], ""))
				code.WriteString("\n")
			}
			if j == len(lines) {
				return nil, &UnclosedError{Block: len(out) + 1, Message: src.Message, Line: i + 1, Fence: fence}
			}
			words := strings.FieldsFunc(info, func(r rune) bool {
				return r == ' ' || r == '\t' || r == '\v' || r == '\f' || r == '\r'
			})
			label := ""
			if len(words) > 0 {
				label = strings.ToLower(words[0])
			}
			out = append(out, Block{Index: len(out), Message: src.Message, Line: i + 1, Fence: fence, Info: info, Label: label, Code: code.String()})
			i = j
		}
	}
	return out, nil
}

// longestRun is the longest run of c in s.
func longestRun(s string, c byte) int {
	best, n := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
			best = max(best, n)
		} else {
			n = 0
		}
	}
	return best
}

func FuzzExtract(f *testing.F) {
	seeds := []string{
		"```bash\necho hi\n```",
		"~~~python\nprint(1)\n~~~",
		"````sh\necho '```'\n````",
		"```Python title=run.py\npass\n```",
		"  ```bash\n  echo hi\n  ```",
		"```python\nprint('a ``` b')\n```",
		"Use ```py``` fences in prose.",
		"    ```bash\n    echo hi\n    ```",
		"> ```bash\n> echo hi\n> ```",
		"```\necho hi\n```",
		"```bash\necho hi\n``` trailing\n",
		"a\r\n```sh\r\nx\r\r\n```\r\n\x1e~~~ py\n y\n~~~~\n",
		"   ```a\n    b\n  c\n\td\n   ````  \t\n\x1e\x1e```\n",
		"```sh\n\x1e```\n",
		"```py\u00a0x\nx\n```",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		var sources []Source
		for i, part := range strings.Split(input, "\x1e") {
			sources = append(sources, Source{Message: i * 2, Text: part})
		}
		blocks, err := Extract(sources)
		wantBlocks, wantErr := refExtract(sources)
		if err != nil {
			if blocks != nil {
				t.Fatalf("error %v returned with %d blocks", err, len(blocks))
			}
			var ue *UnclosedError
			if !errors.As(err, &ue) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			if !reflect.DeepEqual(err, wantErr) {
				t.Fatalf("err %v, reference %v", err, wantErr)
			}
			return
		}
		if wantErr != nil {
			t.Fatalf("no error, reference %v", wantErr)
		}
		if len(blocks) != len(wantBlocks) || (len(blocks) > 0 && !reflect.DeepEqual(blocks, wantBlocks)) {
			t.Fatalf("blocks differ from reference:\n got %+v\nwant %+v", blocks, wantBlocks)
		}
		for i, b := range blocks {
			if b.Index != i {
				t.Fatalf("block %d has index %d", i, b.Index)
			}
			if b.Code != "" && !strings.HasSuffix(b.Code, "\n") {
				t.Fatalf("block %d code does not end in newline: %q", i, b.Code)
			}
			if strings.Contains(b.Code, "\r\n") {
				t.Fatalf("block %d code keeps CRLF: %q", i, b.Code)
			}
			// Round trip: the code fenced with a longer backtick run than any inside it reads back
			// unchanged.
			fence := strings.Repeat("`", max(3, longestRun(b.Code, '`')+1))
			again, err := Extract([]Source{{Message: 7, Text: fence + "x\n" + b.Code + fence + "\n"}})
			if err != nil || len(again) != 1 || again[0].Code != b.Code || again[0].Label != "x" {
				t.Fatalf("round trip of %q: %+v, %v", b.Code, again, err)
			}
		}
	})
}
