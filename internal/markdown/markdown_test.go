package markdown

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

type lc struct{ label, code string }

func extractOne(t *testing.T, body string) ([]lc, error) {
	t.Helper()
	blocks, err := Extract([]Source{{Message: 0, Text: body}})
	if err != nil {
		if blocks != nil {
			t.Fatalf("error %v returned with %d blocks", err, len(blocks))
		}
		return nil, err
	}
	out := []lc{}
	for _, b := range blocks {
		out = append(out, lc{b.Label, b.Code})
	}
	return out, nil
}

// TestContractExamples covers every row of openai-contract.md §3.2. The "no language" row is an
// extraction success with an empty label; the 422 is interp's resolution step.
func TestContractExamples(t *testing.T) {
	cases := []struct {
		body string
		want []lc
		err  string
	}{
		{"```bash\necho hi\n```", []lc{{"bash", "echo hi\n"}}, ""},
		{"~~~python\nprint(1)\n~~~", []lc{{"python", "print(1)\n"}}, ""},
		{"````sh\necho '```'\n````", []lc{{"sh", "echo '```'\n"}}, ""},
		{"```Python title=run.py\npass\n```", []lc{{"python", "pass\n"}}, ""},
		{"  ```bash\n  echo hi\n  ```", []lc{{"bash", "echo hi\n"}}, ""},
		{"```python\nprint('a ``` b')\n```", []lc{{"python", "print('a ``` b')\n"}}, ""},
		{"Use ```py``` fences in prose.", []lc{}, ""},
		{"    ```bash\n    echo hi\n    ```", []lc{}, ""},
		{"> ```bash\n> echo hi\n> ```", []lc{}, ""},
		{"```\necho hi\n```", []lc{{"", "echo hi\n"}}, ""},
		{"```bash\necho hi\n``` trailing\n", nil, `code block 1 (messages[0], line 1) opened with "` + "```" + `" is never closed`},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got, err := extractOne(t, c.body)
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("body %q: err = %v, want %q", c.body, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("body %q: %v", c.body, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("body %q:\n got %q\nwant %q", c.body, got, c.want)
			}
		})
	}
}

func TestFenceRules(t *testing.T) {
	cases := []struct {
		name string
		body string
		want []lc
	}{
		{"empty block", "```bash\n```\n", []lc{{"bash", ""}}},
		{"empty line block", "```bash\n\n```\n", []lc{{"bash", "\n"}}},
		{"tilde info may hold backticks", "~~~ py `x`\nx\n~~~\n", []lc{{"py", "x\n"}}},
		{"tilde block holds backtick fence", "~~~sh\n```\necho\n```\n~~~\n", []lc{{"sh", "```\necho\n```\n"}}},
		{"backtick block holds tilde fence", "```sh\n~~~\n```\n", []lc{{"sh", "~~~\n"}}},
		{"longer closing run closes", "```sh\nx\n`````\n", []lc{{"sh", "x\n"}}},
		{"shorter closing run is content", "````sh\n```\n````\n", []lc{{"sh", "```\n"}}},
		{"closing with trailing spaces and tabs", "```sh\nx\n```  \t \n", []lc{{"sh", "x\n"}}},
		{"closing indented 3 spaces", "```sh\nx\n   ```\n", []lc{{"sh", "x\n"}}},
		{"closing indented 4 spaces is content", "```sh\n    ```\n```\n", []lc{{"sh", "    ```\n"}}},
		{"closing after tab is content", "```sh\n\t```\n```\n", []lc{{"sh", "\t```\n"}}},
		{"closing with other char after run is content", "```sh\n```~\n```\n", []lc{{"sh", "```~\n"}}},
		{"tab in opening indentation", "\t```sh\nx\n\t```\n", []lc{}},
		{"space then tab in opening indentation", " \t```sh\nx\n", []lc{}},
		{"two backticks are not a fence", "``sh\nx\n``\n", []lc{}},
		{"info trimmed, label is first word", "```   Bash\t -e  \nx\n```", []lc{{"bash", "x\n"}}},
		{"tab separates label", "```py\t{.numberLines}\nx\n```", []lc{{"py", "x\n"}}},
		{"nbsp does not separate label", "```py\u00a0x\nx\n```", []lc{{"py\u00a0x", "x\n"}}},
		{"indent strips at most the opening indent", "  ```sh\n    a\n b\nc\n\t d\n  ```", []lc{{"sh", "  a\nb\nc\n\t d\n"}}},
		{"content keeps its own indentation at indent 0", "```sh\n  a\n```", []lc{{"sh", "  a\n"}}},
		{"two blocks with text between", "a\n```sh\n1\n```\nb\n~~~py\n2\n~~~\nc", []lc{{"sh", "1\n"}, {"py", "2\n"}}},
		{"fence right after fence", "```a\n```\n```b\n```", []lc{{"a", ""}, {"b", ""}}},
		{"lone CR mid-line kept", "```sh\na\rb\n```", []lc{{"sh", "a\rb\n"}}},
		{"double-converted line ends", "```sh\r\r\na\r\r\n```\r\r\n", []lc{{"sh", "a\n"}}},
		{"list marker is not a fence", "- ```sh\n  x\n- ```\n", []lc{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := extractOne(t, c.body)
			if err != nil {
				t.Fatalf("body %q: %v", c.body, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("body %q:\n got %q\nwant %q", c.body, got, c.want)
			}
		})
	}
}

// TestOrdinaryBody is the §3.3 example on which fleet's scanner and codellm agree.
func TestOrdinaryBody(t *testing.T) {
	body := "Collect the changed paths, then publish.\n" +
		"```bash\n" +
		"jq -r '.changed_files[].path' \"$FLEET_INPUT\"\n" +
		"```\n" +
		"Now:\n" +
		"```python\n" +
		"print('{\"answer\": \"ok\"}')\n" +
		"```\n"
	got, err := extractOne(t, body)
	if err != nil {
		t.Fatal(err)
	}
	want := []lc{
		{"bash", "jq -r '.changed_files[].path' \"$FLEET_INPUT\"\n"},
		{"python", "print('{\"answer\": \"ok\"}')\n"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestCRLF(t *testing.T) {
	lf := "intro\n  ```Bash x\n  echo a\n\n  echo b\n  ```\n~~~\nz\n~~~\n"
	crlf := strings.ReplaceAll(lf, "\n", "\r\n")
	a, err := Extract([]Source{{Message: 2, Text: lf}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Extract([]Source{{Message: 2, Text: crlf}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("CRLF differs from LF:\n%+v\n%+v", a, b)
	}
	if len(b) != 2 || b[0].Code != "echo a\n\necho b\n" || b[0].Line != 2 || b[1].Line != 7 {
		t.Fatalf("unexpected blocks %+v", b)
	}
	for _, blk := range b {
		if strings.Contains(blk.Code, "\r") {
			t.Fatalf("code keeps a carriage return: %q", blk.Code)
		}
	}
}

func TestBlockFields(t *testing.T) {
	blocks, err := Extract([]Source{
		{Message: 0, Text: "sys\n```bash\necho 1\n```\n"},
		{Message: 3, Text: ""},
		{Message: 5, Text: "a\nb\n   ~~~~ Python3  title=x.py \nprint(2)\n~~~~~\n```sh\n```"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Index: 0, Message: 0, Line: 2, Fence: "```", Info: "bash", Label: "bash", Code: "echo 1\n"},
		{Index: 1, Message: 5, Line: 3, Fence: "~~~~", Info: "Python3  title=x.py", Label: "python3", Code: "print(2)\n"},
		{Index: 2, Message: 5, Line: 6, Fence: "```", Info: "sh", Label: "sh", Code: ""},
	}
	if !reflect.DeepEqual(blocks, want) {
		t.Fatalf("got  %+v\nwant %+v", blocks, want)
	}
}

// TestFenceNeverSpansMessages: a fence opened in one message is unclosed there even if the next message
// holds a closing line.
func TestFenceNeverSpansMessages(t *testing.T) {
	blocks, err := Extract([]Source{
		{Message: 0, Text: "```sh\nok\n```\n"},
		{Message: 1, Text: "x\n~~~python\nprint(1)\n"},
		{Message: 2, Text: "~~~\n"},
	})
	var ue *UnclosedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnclosed) {
		t.Fatalf("err = %v, want *UnclosedError", err)
	}
	if blocks != nil {
		t.Fatalf("blocks returned with error: %+v", blocks)
	}
	want := UnclosedError{Block: 2, Message: 1, Line: 2, Fence: "~~~"}
	if *ue != want {
		t.Fatalf("got %+v want %+v", *ue, want)
	}
	if got := ue.Error(); got != `code block 2 (messages[1], line 2) opened with "~~~" is never closed` {
		t.Fatalf("message %q", got)
	}
}

func TestUnclosedAfterValid(t *testing.T) {
	body := "```bash\necho ok\n```\n\n````python\nprint(1)\n```\n"
	blocks, err := Extract([]Source{{Message: 0, Text: body}})
	if blocks != nil || err == nil {
		t.Fatalf("blocks %+v err %v", blocks, err)
	}
	if err.Error() != "code block 2 (messages[0], line 5) opened with \"````\" is never closed" {
		t.Fatalf("message %q", err.Error())
	}
}

func TestNoSources(t *testing.T) {
	for _, src := range [][]Source{nil, {}, {{Message: 0, Text: ""}}, {{Message: 1, Text: "no code here\n"}}} {
		blocks, err := Extract(src)
		if err != nil || len(blocks) != 0 {
			t.Fatalf("%+v: blocks %+v err %v", src, blocks, err)
		}
	}
}

func TestThousandsOfBlocks(t *testing.T) {
	const perMsg, msgs = 2500, 4
	var sources []Source
	for m := 0; m < msgs; m++ {
		var b strings.Builder
		for i := 0; i < perMsg; i++ {
			fmt.Fprintf(&b, "text %d\n```sh\necho %d %d\n```\n", i, m, i)
		}
		sources = append(sources, Source{Message: m * 2, Text: b.String()})
	}
	blocks, err := Extract(sources)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != perMsg*msgs {
		t.Fatalf("%d blocks", len(blocks))
	}
	for i, b := range blocks {
		m, j := i/perMsg, i%perMsg
		if b.Index != i || b.Message != m*2 || b.Line != 4*j+2 || b.Code != fmt.Sprintf("echo %d %d\n", m, j) {
			t.Fatalf("block %d: %+v", i, b)
		}
	}
}
