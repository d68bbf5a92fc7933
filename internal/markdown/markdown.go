// Package markdown extracts the top-level fenced code blocks of chat messages, following the fence rules
// of openai-contract.md §3 (CommonMark §4.5 without container blocks).
//
// Every recognised block is executed by codellm, so the extractor errs on the side of not seeing code:
// fences count only at the start of a line (after at most three spaces), prose backticks never open a
// block, and a fence that is never closed fails the whole extraction instead of yielding a truncated
// program.
//
// Lines end at "\n"; carriage returns directly before a "\n" are dropped. A lone "\r" elsewhere is an
// ordinary character (CommonMark would end the line there): the contract normalises only "\r\n", and
// fleet's scanner keeps such bytes verbatim, so ordinary bodies extract identically in both.
package markdown

import (
	"errors"
	"strconv"
	"strings"
)

// Source is one scanned message.
type Source struct {
	Message int    // index of the message in the request's messages[]
	Text    string // the message text (parts already concatenated)
}

// Block is one fenced code block.
type Block struct {
	Index   int    // 0-based across all sources
	Message int    // source message index
	Line    int    // 1-based line of the opening fence within its message
	Fence   string // the opening fence run, e.g. "```" or "~~~~"
	Info    string // full info string, trimmed
	Label   string // first whitespace-separated word of Info, lower-cased ("" if none)
	Code    string // content lines each followed by "\n"; "" for an empty block
}

// ErrUnclosed is the sentinel every *UnclosedError matches with errors.Is.
var ErrUnclosed = errors.New("unclosed code fence")

// UnclosedError reports a fence that is never closed within its message. An unclosed fence fails the whole
// extraction: running the blocks before it, or the truncated tail, could run a partial program.
type UnclosedError struct {
	Block   int    // 1-based number the block would have had across all sources
	Message int    // source message index
	Line    int    // 1-based line of the opening fence within its message
	Fence   string // the opening fence run
}

func (e *UnclosedError) Error() string {
	return "code block " + strconv.Itoa(e.Block) + " (messages[" + strconv.Itoa(e.Message) + "], line " +
		strconv.Itoa(e.Line) + ") opened with \"" + e.Fence + "\" is never closed"
}

// Is makes errors.Is(err, ErrUnclosed) hold.
func (e *UnclosedError) Is(target error) bool { return target == ErrUnclosed }

// Extract returns the fenced code blocks of sources in order, numbered across sources. A fence never
// spans two sources. The first unclosed fence yields an *UnclosedError and no blocks at all.
//
// The work is linear in the total text size: each line is inspected once as a potential opening line
// and at most twice as content (once to find the closing line, once more only when indentation or
// carriage returns must be stripped).
func Extract(sources []Source) ([]Block, error) {
	var blocks []Block
	for _, src := range sources {
		var uerr *UnclosedError
		blocks, uerr = extractText(src, blocks)
		if uerr != nil {
			return nil, uerr
		}
	}
	return blocks, nil
}

// lineReader walks a text line by line without copying it. A line ends at '\n'; every '\r' directly
// before a '\n' is dropped, so "\r\n" (and the "\r\r\n" left by tools that convert line endings twice)
// both read as a plain line end and code never carries a "\r\n". A final line without '\n' keeps its
// bytes unchanged.
type lineReader struct {
	text string
	pos  int // offset of the next line
	num  int // 1-based number of the line last returned
}

// next returns the next line, its start offset, and whether carriage returns were dropped from it.
func (r *lineReader) next() (line string, start int, crDropped, ok bool) {
	if r.pos >= len(r.text) {
		return "", 0, false, false
	}
	start = r.pos
	rest := r.text[start:]
	nl := strings.IndexByte(rest, '\n')
	if nl < 0 {
		line = rest
		r.pos = len(r.text)
	} else {
		line = rest[:nl]
		r.pos = start + nl + 1
		if trimmed := strings.TrimRight(line, "\r"); len(trimmed) != len(line) {
			line, crDropped = trimmed, true
		}
	}
	r.num++
	return line, start, crDropped, true
}

// opening describes a parsed opening fence line.
type opening struct {
	indent int    // leading spaces, 0–3
	fence  string // the run of '`' or '~'
	info   string // trimmed info string
}

// parseOpening reports whether line opens a fenced code block (contract §3.1 rule 1).
func parseOpening(line string) (opening, bool) {
	indent := 0
	for indent < len(line) && indent < 3 && line[indent] == ' ' {
		indent++
	}
	// A fourth space makes the line indented code and a tab anywhere in the indentation disqualifies it;
	// both fail this check because the character after the indentation must be a fence character.
	if indent >= len(line) {
		return opening{}, false
	}
	c := line[indent]
	if c != '`' && c != '~' {
		return opening{}, false
	}
	end := indent
	for end < len(line) && line[end] == c {
		end++
	}
	if end-indent < 3 {
		return opening{}, false
	}
	rest := line[end:]
	// CommonMark forbids backticks in a backtick fence's info string; without this rule "```py```" in
	// prose-like text would open a block.
	if c == '`' && strings.IndexByte(rest, '`') >= 0 {
		return opening{}, false
	}
	return opening{indent: indent, fence: line[indent:end], info: trimSpace(rest)}, true
}

// isClosing reports whether line closes a block opened with fence (contract §3.1 rule 3): 0–3 spaces, a
// run of the same character at least as long, then only spaces or tabs.
func isClosing(line, fence string) bool {
	i := 0
	for i < len(line) && i < 3 && line[i] == ' ' {
		i++
	}
	c := fence[0]
	start := i
	for i < len(line) && line[i] == c {
		i++
	}
	if i-start < len(fence) {
		return false
	}
	for ; i < len(line); i++ {
		if line[i] != ' ' && line[i] != '\t' {
			return false
		}
	}
	return true
}

// extractText appends the blocks of one source to blocks.
func extractText(src Source, blocks []Block) ([]Block, *UnclosedError) {
	r := lineReader{text: src.Text}
	for {
		line, _, _, ok := r.next()
		if !ok {
			return blocks, nil
		}
		op, isOpen := parseOpening(line)
		if !isOpen {
			continue
		}
		openLine := r.num
		contentStart := r.pos
		needCopy := op.indent > 0
		closed := false
		contentEnd := contentStart
		for {
			l, start, crDropped, ok := r.next()
			if !ok {
				break
			}
			if isClosing(l, op.fence) {
				closed, contentEnd = true, start
				break
			}
			needCopy = needCopy || crDropped
		}
		if !closed {
			return blocks, &UnclosedError{Block: len(blocks) + 1, Message: src.Message, Line: openLine, Fence: op.fence}
		}
		var code string
		if needCopy {
			code = copyContent(src.Text[contentStart:contentEnd], op.indent)
		} else {
			// Without indentation or carriage returns to strip, the content lines with their '\n'
			// are exactly the bytes between the opening and closing lines: no copy needed.
			code = src.Text[contentStart:contentEnd]
		}
		blocks = append(blocks, Block{
			Index:   len(blocks),
			Message: src.Message,
			Line:    openLine,
			Fence:   op.fence,
			Info:    op.info,
			Label:   strings.ToLower(firstWord(op.info)),
			Code:    code,
		})
	}
}

// copyContent rebuilds the content region (whole lines, each ending in '\n') with up to indent leading
// spaces and the carriage returns before each '\n' removed.
func copyContent(region string, indent int) string {
	var b strings.Builder
	b.Grow(len(region))
	r := lineReader{text: region}
	for {
		line, _, _, ok := r.next()
		if !ok {
			return b.String()
		}
		for n := 0; n < indent && len(line) > 0 && line[0] == ' '; n++ {
			line = line[1:]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
}

// isSpace is CommonMark's whitespace character set (space, tab, line tabulation, form feed, carriage
// return; newline cannot occur within a line). Unicode spaces are deliberately not separators: a label
// followed by U+00A0 is one unknown word, not a known label with an attribute.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'
}

func trimSpace(s string) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// firstWord returns the first whitespace-separated word of an already trimmed info string.
func firstWord(info string) string {
	for i := 0; i < len(info); i++ {
		if isSpace(info[i]) {
			return info[:i]
		}
	}
	return info
}
