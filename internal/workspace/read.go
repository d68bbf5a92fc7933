package workspace

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Limits shared by the read-side tools (§9.3–§9.5).
const (
	maxContentBytes = 1 << 20 // read_file content, and the per-file size for search and edits
	readChunk       = 64 << 10

	defaultMaxLines = 200
	maxMaxLines     = 500
)

// ReadFileRequest is the §9.2 read_file request.
type ReadFileRequest struct {
	envelope
	Path      string `json:"path"`
	StartLine *int   `json:"startLine,omitempty"`
	MaxLines  *int   `json:"maxLines,omitempty"`
}

// ReadFileResult is the §9.2 read_file result.
type ReadFileResult struct {
	Path          string `json:"path"`
	Content       string `json:"content"`
	StartLine     int    `json:"startLine"`
	EndLine       int    `json:"endLine"`
	Truncated     bool   `json:"truncated"`
	NextStartLine *int   `json:"nextStartLine,omitempty"`
}

// openRegular opens rel through the resolver and insists on a regular file. The returned statInfo comes from
// fstat of the very descriptor that will be read, so the check and the use concern the same file.
func (w *Workspace) openRegular(rel string, noSymlinks bool, fallback Code) (*os.File, statInfo, error) {
	if rel == "" {
		return nil, statInfo{}, newErr(CodeInvalidPath, "path names the workspace root, not a file")
	}
	f, err := w.res.openFile(rel, noSymlinks)
	if err != nil {
		return nil, statInfo{}, pathError(err, rel, fallback)
	}
	si, err := fstatFile(f)
	if err != nil {
		f.Close()
		return nil, statInfo{}, pathError(err, rel, fallback)
	}
	if !si.mode.IsRegular() {
		f.Close()
		return nil, statInfo{}, newErr(CodeInvalidPath, "path is not a regular file: "+rel)
	}
	if si.nlink > 1 {
		// A hard link is a second name for a file that may live outside the root (a symlink check
		// cannot see it), so multiply-linked files are refused, as sandbox-runtime does.
		f.Close()
		return nil, statInfo{}, newErr(CodeInvalidPath, fmt.Sprintf("path is a file with %d hard links (refused: a hard link may lead outside the workspace): %s", si.nlink, rel))
	}
	return f, si, nil
}

// ReadFile implements read_file (§9.3): a window of lines, streamed through the verified descriptor in 64 KiB
// chunks up to the file's initial size, so that a huge file costs at most the window plus one chunk of memory.
func (w *Workspace) ReadFile(ctx context.Context, r *ReadFileRequest) (*ReadFileResult, error) {
	rel, err := cleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	start, maxLines := 1, defaultMaxLines
	if r.StartLine != nil {
		if *r.StartLine < 1 {
			return nil, newErr(CodeInvalidRequest, "startLine must be at least 1")
		}
		start = *r.StartLine
	}
	if r.MaxLines != nil {
		if *r.MaxLines < 1 || *r.MaxLines > maxMaxLines {
			return nil, newErr(CodeInvalidRequest, "maxLines must be between 1 and 500")
		}
		maxLines = *r.MaxLines
	}
	if err := w.checkRoot(); err != nil {
		return nil, err
	}
	f, si, err := w.openRegular(rel, false, CodeInvalidPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	deadline := time.Now().Add(toolDeadline)
	win := lineWindow{start: start, maxLines: maxLines, budget: maxContentBytes, line: 1}
	var dec decoder
	bufp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bufp)
	raw := *bufp
	var text []byte
	src := io.LimitReader(f, si.size)
	for !win.done {
		if err := ctxErr(ctx); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, newErr(CodeReadLimitExceeded, "reading "+rel+" took longer than 10 s")
		}
		n, rerr := src.Read(raw)
		text = dec.write(text[:0], raw[:n])
		if rerr == io.EOF {
			text = dec.flush(text)
		}
		win.feed(text)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, newErr(CodeInvalidPath, "cannot read "+rel+": "+errnoText(rerr))
		}
	}
	win.finish()
	if win.tooLong {
		return nil, newErr(CodeReadLimitExceeded, "the first requested line of "+rel+" is larger than 1 MiB")
	}
	// The result echoes the caller's path verbatim: the shared result validator compares it with the request.
	res := &ReadFileResult{Path: r.Path, StartLine: start}
	if len(win.lines) == 0 {
		res.EndLine = start - 1
		return res, nil
	}
	res.Content = string(bytes.Join(win.lines, []byte("\n")))
	res.EndLine = start + len(win.lines) - 1
	if win.truncated {
		res.Truncated = true
		next := res.EndLine + 1
		res.NextStartLine = &next
	}
	return res, nil
}

// lineWindow selects lines [start, start+maxLines) from decoded text fed in pieces. Lines are split on LF with
// CR kept; a final LF adds no line; an empty input is one empty line.
type lineWindow struct {
	start, maxLines int
	budget          int // bytes of content still allowed, separators included

	line      int    // number of the line being read
	seen      bool   // the current line has at least one byte (or its LF)
	cur       []byte // the current line, buffered only when it is inside the window
	lines     [][]byte
	done      bool
	truncated bool
	tooLong   bool
}

func (l *lineWindow) inWindow() bool { return l.line >= l.start && l.line < l.start+l.maxLines }

// room is how many bytes the current line may have and still fit.
func (l *lineWindow) room() int {
	if len(l.lines) > 0 {
		return l.budget - 1
	}
	return l.budget
}

func (l *lineWindow) feed(p []byte) {
	for len(p) > 0 && !l.done {
		if l.line >= l.start+l.maxLines {
			// Any byte beyond the window means another line exists.
			l.truncated, l.done = true, true
			return
		}
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		l.seen = true
		if l.inWindow() {
			if len(l.cur)+len(seg) > l.room() {
				l.stopTooBig()
				return
			}
			l.cur = append(l.cur, seg...)
		}
		if i < 0 {
			return
		}
		l.endLine()
		p = p[i+1:]
	}
}

func (l *lineWindow) stopTooBig() {
	l.done = true
	if len(l.lines) == 0 {
		l.tooLong = true
		return
	}
	l.truncated = true
}

func (l *lineWindow) endLine() {
	if l.inWindow() {
		if len(l.lines) > 0 {
			l.budget--
		}
		l.budget -= len(l.cur)
		l.lines = append(l.lines, l.cur)
		l.cur = nil
	}
	l.line++
	l.seen = false
}

// finish closes the last line at end of input: it exists if it has content, or if the input was empty.
func (l *lineWindow) finish() {
	if l.done {
		return
	}
	if l.seen || l.line == 1 {
		l.endLine()
	}
}

// chunkPool recycles read_file's 64 KiB read buffers, which would otherwise dominate the cost of small reads.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// toolDeadline is the §9 deadline of read_file, search_text and list_files (a variable so tests can expire it).
var toolDeadline = 10 * time.Second
