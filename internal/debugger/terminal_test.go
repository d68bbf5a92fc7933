package debugger_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/debugger"
)

func TestTerminalEditsBufferInEditor(t *testing.T) {
	eng := newEngine(t, envOpts{})
	s, err := debugger.NewSession(eng, threeBlocks, []byte(`{"tag":"cli"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out bytes.Buffer
	// The "editor" is a real process rewriting the temporary file in place, as vi would.
	edit := debugger.EditorCommand(`sed -i s/ABC/XYZ/`, nil, io.Discard, io.Discard)
	ok, err := debugger.Terminal(context.Background(), s, strings.NewReader("\n\nb\ne\n\n"), &out, edit)
	if err != nil || !ok {
		t.Fatalf("Terminal = %v, %v\n%s", ok, err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"codellm debug: 3 block(s)",
		"── block 1/3 bash: ok, exit 0",
		"pipe buffer → block 2/3 (8 bytes):\nabc\ndef\n",
		"pipe buffer → block 3/3 (8 bytes):\nABC\nDEF\n",
		"pipe buffer (edited) (8 bytes):\nXYZ\nDEF\n",
		`write_note {"path":"out.md","content":"XYZ\nDEF\n"}`,
		`finish {"answer":"cli:8"}`,
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestTerminalFailureAndQuit(t *testing.T) {
	eng := newEngine(t, envOpts{})
	body := block("bash", `printf 'x\377'`) + block("bash", "echo boom >&2; exit 3")
	s, err := debugger.NewSession(eng, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out bytes.Buffer
	failing := debugger.EditorCommand("false", nil, io.Discard, io.Discard)
	ok, err := debugger.Terminal(context.Background(), s, strings.NewReader("r\ne\nwhat\nq\n"), &out, failing)
	if err != nil || ok {
		t.Fatalf("Terminal = %v, %v\n%s", ok, err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"pipe buffer → block 2/2 (2 bytes, not UTF-8, hex):\n00000000  78 ff\n",
		"error: block 2/2: non-zero exit (code 3): boom",
		"the buffer is unchanged",
		"edit failed: editor \"false\"",
		`unknown command "what"`,
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("output lacks %q:\n%s", want, got)
		}
	}
	if st := s.State(0); st.Next != 1 || string(st.Buffer) != "x\xff" {
		t.Fatalf("state after failure: next %d buffer %q", st.Next, st.Buffer)
	}
	// End of input stops without error.
	out.Reset()
	ok, err = debugger.Terminal(context.Background(), s, strings.NewReader(""), &out, nil)
	if err != nil || ok || !strings.Contains(out.String(), "end of input") {
		t.Fatalf("EOF: %v %v %s", ok, err, out.String())
	}
}
