package workspace

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"unicode/utf8"
)

// Edit limits (§9.2).
const (
	maxEdits     = 100
	maxEditBytes = 1 << 20
)

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// Edit is one replacement of the batch form.
type Edit struct {
	OldText *string `json:"oldText"`
	NewText *string `json:"newText"`
}

// EditFileRequest is the §9.2 edit_file request: oldText+newText (single form) or edits (batch form).
type EditFileRequest struct {
	envelope
	Path               string  `json:"path"`
	OldText            *string `json:"oldText,omitempty"`
	NewText            *string `json:"newText,omitempty"`
	Edits              []Edit  `json:"edits,omitempty"`
	ExpectedBaseSha256 *string `json:"expectedBaseSha256,omitempty"`
}

// PreviewEditRequest is the §9.2 preview_edit request: edit_file without expectedBaseSha256.
type PreviewEditRequest struct {
	envelope
	Path    string  `json:"path"`
	OldText *string `json:"oldText,omitempty"`
	NewText *string `json:"newText,omitempty"`
	Edits   []Edit  `json:"edits,omitempty"`
}

// EditFileResult is the §9.2 edit_file result.
type EditFileResult struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
	BytesWritten int    `json:"bytesWritten"`
}

// PreviewEditResult is the §9.2 preview_edit result.
type PreviewEditResult struct {
	Path         string `json:"path"`
	Content      string `json:"content"`
	HasUTF8BOM   bool   `json:"hasUtf8Bom"`
	BaseSha256   string `json:"baseSha256"`
	Replacements int    `json:"replacements"`
	BytesWritten int    `json:"bytesWritten"`
}

type pair struct{ old, new string }

// editForm validates the two request forms and returns the edits in order.
func editForm(oldText, newText *string, edits []Edit, editsGiven bool) ([]pair, error) {
	single := oldText != nil || newText != nil
	switch {
	case single && editsGiven:
		return nil, newErr(CodeInvalidRequest, "use either oldText/newText or edits, not both")
	case single:
		if oldText == nil || newText == nil {
			return nil, newErr(CodeInvalidRequest, "oldText and newText are both required")
		}
		if *oldText == "" {
			return nil, newErr(CodeInvalidRequest, "oldText must not be empty")
		}
		if len(*oldText) > maxEditBytes || len(*newText) > maxEditBytes {
			return nil, newErr(CodeInvalidRequest, "oldText and newText must each be at most 1 MiB")
		}
		return []pair{{*oldText, *newText}}, nil
	case editsGiven:
		if len(edits) < 1 || len(edits) > maxEdits {
			return nil, newErr(CodeInvalidRequest, "edits must have between 1 and 100 entries")
		}
		total := 0
		out := make([]pair, len(edits))
		for i, e := range edits {
			if e.OldText == nil || e.NewText == nil {
				return nil, newErr(CodeInvalidRequest, "every edit needs oldText and newText")
			}
			if *e.OldText == "" {
				return nil, newErr(CodeInvalidRequest, "oldText must not be empty")
			}
			total += len(*e.OldText) + len(*e.NewText)
			out[i] = pair{*e.OldText, *e.NewText}
		}
		if total > maxEditBytes {
			return nil, newErr(CodeInvalidRequest, "the texts of all edits together must be at most 1 MiB")
		}
		return out, nil
	}
	return nil, newErr(CodeInvalidRequest, "oldText/newText or edits is required")
}

// occurrences counts matches of sub in s, overlapping ones included, stopping at limit.
func occurrences(s, sub string, limit int) (int, int) {
	n, first := 0, -1
	for i := 0; i <= len(s)-len(sub); {
		j := strings.Index(s[i:], sub)
		if j < 0 {
			break
		}
		if first < 0 {
			first = i + j
		}
		n++
		if n >= limit {
			break
		}
		// Overlapping occurrences count: resume one character after this match's start.
		_, w := utf8.DecodeRuneInString(s[i+j:])
		i += j + w
	}
	return n, first
}

// plannedEdit is an edit computed from one read of the file.
type plannedEdit struct {
	rel     string
	base    expectedFile
	hash    string
	bom     bool
	content string // new text, without BOM
	edits   int
}

// planEdit implements §9.7 steps 1–4. limitCode is the code for a file over 1 MiB (edit and preview differ).
func (w *Workspace) planEdit(ctx context.Context, path string, edits []pair, expected *string, limitCode Code) (*plannedEdit, error) {
	rel, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	if expected != nil && !isSHA256Hex(*expected) {
		return nil, newErr(CodeInvalidRequest, "expectedBaseSha256 must be 64 hexadecimal digits")
	}
	if err := w.checkRoot(); err != nil {
		return nil, err
	}
	// Edits write, so the path may not pass through any symlink; a preview shows exactly what the edit does.
	f, si, err := w.openRegular(rel, true, CodeWriteUnavailable)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if si.size > maxContentBytes {
		return nil, newErr(limitCode, "file is larger than 1 MiB: "+rel)
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxContentBytes+1))
	if err != nil {
		return nil, newErr(CodeWriteUnavailable, "cannot read "+rel+": "+errnoText(err))
	}
	if len(raw) > maxContentBytes {
		return nil, newErr(limitCode, "file is larger than 1 MiB: "+rel)
	}
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:])
	if expected != nil && !strings.EqualFold(*expected, hash) {
		return nil, newErr(CodeEditConflict, "file does not have the expected base hash: "+rel)
	}
	body, bom := raw, bytes.HasPrefix(raw, utf8BOM)
	if bom {
		body = raw[3:]
	}
	if !utf8.Valid(body) {
		return nil, newErr(CodeInvalidRequest, "file is not valid UTF-8: "+rel)
	}
	text := string(body)
	for i, e := range edits {
		if err := ctxErr(ctx); err != nil {
			return nil, err
		}
		n, at := occurrences(text, e.old, 2)
		if n != 1 {
			what := "does not occur"
			if n > 1 {
				what = "occurs more than once"
			}
			return nil, newErr(CodeEditConflict, "oldText of edit "+itoa(i+1)+" "+what+" in "+rel)
		}
		if len(text)-len(e.old)+len(e.new) > maxContentBytes {
			return nil, newErr(CodeWriteLimitExceeded, "the edited file would be larger than 1 MiB: "+rel)
		}
		text = text[:at] + e.new + text[at+len(e.old):]
	}
	final := len(text)
	if bom {
		final += 3
	}
	if final > maxContentBytes {
		return nil, newErr(CodeWriteLimitExceeded, "the edited file would be larger than 1 MiB: "+rel)
	}
	return &plannedEdit{rel: rel, base: expectedFile{id: si.id, data: raw}, hash: hash, bom: bom, content: text, edits: len(edits)}, nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// PreviewEdit implements preview_edit (§9.7 step 5): the edit's outcome, without writing.
func (w *Workspace) PreviewEdit(ctx context.Context, r *PreviewEditRequest) (*PreviewEditResult, error) {
	if !w.opts.AllowWrites {
		return nil, newErr(CodeWriteDisabled, "the workspace is read-only")
	}
	edits, err := editForm(r.OldText, r.NewText, r.Edits, r.Edits != nil)
	if err != nil {
		return nil, err
	}
	p, err := w.planEdit(ctx, r.Path, edits, nil, CodeReadLimitExceeded)
	if err != nil {
		return nil, err
	}
	n := len(p.content)
	if p.bom {
		n += 3
	}
	return &PreviewEditResult{Path: r.Path, Content: p.content, HasUTF8BOM: p.bom, BaseSha256: p.hash,
		Replacements: p.edits, BytesWritten: n}, nil
}

// EditFile implements edit_file (§9.7 step 6): the planned text is staged and installed like write_file, but
// only if the target is still the very file (identity and bytes) the edit was computed from.
func (w *Workspace) EditFile(ctx context.Context, r *EditFileRequest) (*EditFileResult, error) {
	if !w.opts.AllowWrites {
		return nil, newErr(CodeWriteDisabled, "the workspace is read-only")
	}
	edits, err := editForm(r.OldText, r.NewText, r.Edits, r.Edits != nil)
	if err != nil {
		return nil, err
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	p, err := w.planEdit(ctx, r.Path, edits, r.ExpectedBaseSha256, CodeWriteLimitExceeded)
	if err != nil {
		return nil, err
	}
	data := []byte(p.content)
	if p.bom {
		data = append(append([]byte{}, utf8BOM...), data...)
	}
	if _, err := w.install(ctx, p.rel, data, installOpts{overwrite: true, expect: &p.base}); err != nil {
		return nil, err
	}
	return &EditFileResult{Path: r.Path, Replacements: p.edits, BytesWritten: len(data)}, nil
}
