package debugger

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"unicode/utf8"
)

// EditFunc returns an edited copy of a pipe buffer.
type EditFunc func(buf []byte) ([]byte, error)

// EditorCommand edits a buffer in the user's editor: editor (a shell command line such as "vim" or
// "code -w"; empty: $VISUAL, then $EDITOR, then vi) runs on a private temporary file holding the buffer,
// with the given terminal streams, and the file's content afterwards is the new buffer.
func EditorCommand(editor string, stdin io.Reader, stdout, stderr io.Writer) EditFunc {
	if editor == "" {
		editor = os.Getenv("VISUAL")
	}
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	if editor == "" {
		editor = "vi"
	}
	return func(buf []byte) ([]byte, error) {
		f, err := os.CreateTemp("", "codellm-buffer-*.txt")
		if err != nil {
			return nil, err
		}
		path := f.Name()
		defer os.Remove(path)
		_, werr := f.Write(buf)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, werr
		}
		// The path travels as "$1", never spliced into the command line.
		cmd := exec.Command("sh", "-c", editor+` "$1"`, "codellm-editor", path)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("editor %q: %w (buffer unchanged)", editor, err)
		}
		return os.ReadFile(path)
	}
}

// Terminal steps a session interactively, like the step UI: it prints each block's result and the pipe
// buffer, then waits for a command line — Enter steps, "r" runs to the end (stopping at a failure), "e"
// edits the buffer with edit, "b" shows the buffer, "0" resets, "q" quits. It returns whether the run
// finished with a valid output contract; end of input quits.
func Terminal(ctx context.Context, s *Session, in io.Reader, out io.Writer, edit EditFunc) (bool, error) {
	rd := bufio.NewReader(in)
	n := len(s.blocks)
	fmt.Fprintf(out, "codellm debug: %d block(s)\n", n)
	for _, b := range s.blocks {
		fmt.Fprintf(out, "  %d/%d %-10s %s\n", b.Index+1, n, b.Lang, firstLine(b.Code))
	}
	runAll := false
	for {
		st := s.State(0)
		if st.Done {
			return printFinal(out, st.Final), nil
		}
		if !runAll {
			fmt.Fprintf(out, "\nnext: block %d/%d (%s), stdin: buffer (%d bytes)\n", st.Next+1, n, s.blocks[st.Next].Lang, len(st.Buffer))
			fmt.Fprint(out, "[Enter] step  [r] run to end  [e] edit buffer  [b] show buffer  [0] reset  [q] quit > ")
			line, err := rd.ReadString('\n')
			if err != nil && line == "" {
				if errors.Is(err, io.EOF) {
					fmt.Fprintln(out, "\nend of input: stopping")
					return false, nil
				}
				return false, err
			}
			switch cmd := strings.TrimSpace(line); cmd {
			case "":
			case "r":
				runAll = true
			case "e":
				if edit == nil {
					fmt.Fprintln(out, "no editor configured")
					continue
				}
				nb, err := edit(st.Buffer)
				if err == nil {
					err = s.SetBuffer(nb)
				}
				if err != nil {
					fmt.Fprintf(out, "edit failed: %v\n", err)
					continue
				}
				printBuffer(out, "pipe buffer (edited)", nb)
				continue
			case "b":
				printBuffer(out, "pipe buffer", st.Buffer)
				continue
			case "0":
				if err := s.Reset(); err != nil {
					return false, err
				}
				fmt.Fprintln(out, "reset: next is block 1")
				continue
			case "q":
				return false, nil
			default:
				fmt.Fprintf(out, "unknown command %q\n", cmd)
				continue
			}
		}
		res, err := s.Step(ctx, nil)
		if err != nil {
			return false, err
		}
		printStep(out, res, n)
		if !res.Run.OK {
			runAll = false
		}
	}
}

func firstLine(code string) string {
	line, _, more := strings.Cut(code, "\n")
	if more && strings.TrimSpace(code[len(line)+1:]) != "" {
		line += " …"
	}
	return line
}

func printStep(out io.Writer, res *StepResult, n int) {
	r := res.Run
	exit := "signal " + r.Signal
	if r.ExitCode != nil {
		exit = fmt.Sprintf("exit %d", *r.ExitCode)
	}
	fmt.Fprintf(out, "\n── block %d/%d %s: %s, %s, %d ms, peak %d KiB, stdin from %s\n", r.Block+1, n, r.Lang, r.Outcome, exit,
		r.Duration.Milliseconds(), r.MaxRSS/1024, res.StdinSource)
	if !r.OK {
		fmt.Fprintf(out, "error: %s\n", r.Error)
	}
	printBuffer(out, "stdout", r.Stdout)
	printBuffer(out, "stderr", r.Stderr)
	switch {
	case !r.OK:
		fmt.Fprintln(out, "the buffer is unchanged: edit it (e) and step again, or quit (q)")
	case !res.Done:
		printBuffer(out, fmt.Sprintf("pipe buffer → block %d/%d", res.Next+1, n), res.Buffer)
	}
}

// printBuffer shows bytes as text, or as a hex dump when they are not UTF-8.
func printBuffer(out io.Writer, label string, b []byte) {
	if len(b) == 0 {
		fmt.Fprintf(out, "%s: (empty)\n", label)
		return
	}
	if utf8.Valid(b) {
		fmt.Fprintf(out, "%s (%d bytes):\n%s", label, len(b), b)
		if b[len(b)-1] != '\n' {
			fmt.Fprintln(out, "⏎ (no final newline)")
		}
		return
	}
	fmt.Fprintf(out, "%s (%d bytes, not UTF-8, hex):\n", label, len(b))
	for off := 0; off < len(b); off += 16 {
		end := min(off+16, len(b))
		fmt.Fprintf(out, "%08x  % x\n", off, b[off:end])
	}
}

func printFinal(out io.Writer, f *Final) bool {
	if f == nil {
		return false
	}
	if !f.OK {
		fmt.Fprintf(out, "\nfinal: %s: %s\n", f.Err.Code, f.Err.Message)
		return false
	}
	fmt.Fprintln(out, "\nfinal: tool calls")
	for _, c := range f.ToolCalls {
		fmt.Fprintf(out, "  %s %s %s\n", c.ID, c.Name, c.Arguments)
	}
	return true
}
