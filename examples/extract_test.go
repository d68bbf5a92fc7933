package examples

import (
	"regexp"
	"strings"
)

// command is one example command of a document as printed, and what the document says it prints.
type command struct {
	file string // the document, relative to the repository root
	line int    // its first line in the document
	text string // the command as bash reads it (continuation lines and multi-line quotes included)
	want string // the output the document shows ("" shows none); "…" stands for anything
	// transcript: the document shows the output lines after a "$ " prompt (compared line by line)
	// rather than as a JSON value or a "→ …" comment (compared with the whitespace between lines dropped).
	transcript bool
}

var fenceRe = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})\\s*([^`\\s]*)")

// block is one fenced block: its info string's first word, its first content line and its lines.
type block struct {
	lang  string
	line  int
	lines []string
}

// fencedBlocks returns the fenced blocks of a Markdown document (CommonMark's opening and closing rules,
// enough for the repository's documents: a closing fence of the same character, at least as long).
func fencedBlocks(text string) []block {
	lines := strings.Split(text, "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		m := fenceRe.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		b := block{lang: m[2], line: i + 2}
		for i++; i < len(lines); i++ {
			t := strings.TrimSpace(lines[i])
			if strings.HasPrefix(t, m[1]) && strings.Trim(t, m[1][:1]) == "" {
				break
			}
			b.lines = append(b.lines, lines[i])
		}
		out = append(out, b)
	}
	return out
}

// examples returns the commands of a document: every line of its sh/bash/shell blocks (a JSON block right
// after one is its last command's output), and every "$ " prompt of its text blocks with the lines below it.
func examples(file, text string) []command {
	var out []command
	blocks := fencedBlocks(text)
	for i, b := range blocks {
		switch b.lang {
		case "sh", "bash", "shell", "console":
			cmds := shellCommands(file, b)
			if i+1 < len(blocks) && blocks[i+1].lang == "json" && len(cmds) > 0 && onlyBlankBetween(text, b, blocks[i+1]) {
				cmds[len(cmds)-1].want = strings.Join(blocks[i+1].lines, "\n")
			}
			out = append(out, cmds...)
		case "text", "":
			out = append(out, transcript(file, b)...)
		}
	}
	return out
}

// onlyBlankBetween reports whether nothing but blank lines separates block a's closing fence from b.
func onlyBlankBetween(text string, a, b block) bool {
	lines := strings.Split(text, "\n")
	for _, l := range lines[a.line+len(a.lines) : b.line-2] {
		if strings.TrimSpace(l) != "" {
			return false
		}
	}
	return true
}

// shellCommands splits a shell block into commands as bash would read them: a line continues while a
// quote is open or it ends in a backslash. A comment "# {…}" or "# → …", trailing or on its own line
// after a command, is that command's printed output.
func shellCommands(file string, b block) []command {
	var out []command
	var cur []string
	for i, l := range b.lines {
		if len(cur) == 0 {
			t := strings.TrimSpace(l)
			if t == "" {
				continue
			}
			if strings.HasPrefix(t, "#") {
				if w := printedOutput(t); w != "" && len(out) > 0 {
					out[len(out)-1].want = w
				}
				continue
			}
		}
		cur = append(cur, l)
		text := strings.Join(cur, "\n")
		if open, comment := scanShell(text); !open {
			c := command{file: file, line: b.line + i - len(cur) + 1, text: text}
			c.want = printedOutput(comment)
			out = append(out, c)
			cur = nil
		}
	}
	return out
}

// printedOutput is the output a comment shows: "# {…}" is a JSON value, "# … → X" shows X; any other
// comment shows none.
func printedOutput(comment string) string {
	c := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(comment), "#"))
	if strings.HasPrefix(c, "{") {
		return c
	}
	if _, after, ok := strings.Cut(c, "→ "); ok {
		return strings.TrimSpace(after)
	}
	return ""
}

// scanShell reports whether text leaves a quote open or ends in a line continuation, and the trailing
// comment of its last line ("" for none).
func scanShell(text string) (open bool, comment string) {
	var single, double bool
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case single:
			single = c != '\''
		case c == '\\':
			i++
		case double:
			double = c != '"'
		case c == '\'':
			single = true
		case c == '"':
			double = true
		case c == '#' && (i == 0 || text[i-1] == ' ' || text[i-1] == '\t'):
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				return false, text[i:]
			}
			i += end
		}
	}
	return single || double || strings.HasSuffix(text, "\\"), ""
}

// transcript returns the "$ " prompts of a text block with the lines each shows.
func transcript(file string, b block) []command {
	var out []command
	for i, l := range b.lines {
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			out = append(out, command{file: file, line: b.line + i, text: cmd, transcript: true})
			continue
		}
		if len(out) > 0 {
			c := &out[len(out)-1]
			c.want += l + "\n"
		}
	}
	return out
}

// matches reports whether got is what the document printed: want's "…" stands for any text. A
// transcript compares lines with trailing spaces dropped; a JSON value or arrow comment compares with the
// line breaks and the indentation after them dropped (the document wraps what the program prints on one
// line).
func matches(c command, got string) bool {
	want := strings.TrimRight(c.want, "\n")
	got = strings.TrimRight(got, "\n")
	if c.transcript {
		want, got = trimLines(want), trimLines(got)
	} else {
		want = regexp.MustCompile(`\n\s*`).ReplaceAllString(want, "")
		got = regexp.MustCompile(`\n\s*`).ReplaceAllString(got, "")
	}
	parts := strings.Split(want, "…")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	return regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*?") + `\z`).MatchString(got)
}

func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimRight(lines[i], " \t")
	}
	return strings.Join(lines, "\n")
}
