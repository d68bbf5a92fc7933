package workspace

import (
	"bytes"
	"context"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/codellm/codellm/internal/wire"
)

// search_text limits (§9.2, §9.4).
const (
	maxQueryUnits     = 4096
	maxQueryBytes     = 2000
	defaultMaxResults = 50
	maxSearchResults  = 200
	maxMatchTextUnits = 2000
)

// The candidate caps of §9.4 (variables so tests can reach them with small trees).
var (
	maxSearchCandidate = 20000
	maxCandidateBytes  = 1 << 20
)

// SearchTextRequest is the §9.2 search_text request.
type SearchTextRequest struct {
	envelope
	Query      string  `json:"query"`
	Path       *string `json:"path,omitempty"`
	MaxResults *int    `json:"maxResults,omitempty"`
}

// SearchMatch is one §9.4 match.
type SearchMatch struct {
	Path   string `json:"path"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
	Text   string `json:"text"`
}

// SearchTextResult is the §9.2 search_text result.
type SearchTextResult struct {
	Matches   []SearchMatch `json:"matches"`
	Truncated bool          `json:"truncated"`
}

func validateQuery(q string) error {
	switch {
	case q == "":
		return newErr(CodeInvalidRequest, "query must not be empty")
	case !utf8.ValidString(q):
		return newErr(CodeInvalidRequest, "query is not valid Unicode")
	case wire.UTF16Len(q) > maxQueryUnits:
		return newErr(CodeInvalidRequest, "query is longer than 4096 UTF-16 units")
	case len(q) > maxQueryBytes:
		return newErr(CodeInvalidRequest, "query is longer than 2000 UTF-8 bytes")
	case strings.ContainsAny(q, "\x00\r\n"):
		return newErr(CodeInvalidRequest, "query must not contain NUL, CR or LF")
	}
	return nil
}

// SearchText implements search_text (§9.4): literal, case-sensitive, first occurrence per line.
func (w *Workspace) SearchText(ctx context.Context, r *SearchTextRequest) (*SearchTextResult, error) {
	if err := validateQuery(r.Query); err != nil {
		return nil, err
	}
	maxResults := defaultMaxResults
	if r.MaxResults != nil {
		if *r.MaxResults < 1 || *r.MaxResults > maxSearchResults {
			return nil, newErr(CodeInvalidRequest, "maxResults must be between 1 and 200")
		}
		maxResults = *r.MaxResults
	}
	if err := w.checkRoot(); err != nil {
		return nil, err
	}
	scope, _, err := w.resolveScope(r.Path)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, toolDeadline)
	defer cancel()
	timeout := func() error {
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		return newErr(CodeSearchTimeout, "search took longer than 10 s")
	}

	cands, truncated, err := w.searchCandidates(dctx, scope)
	if err != nil {
		if dctx.Err() != nil {
			return nil, timeout()
		}
		return nil, err
	}
	res := &SearchTextResult{Matches: []SearchMatch{}, Truncated: truncated}
	qUnits := wire.UTF16Len(r.Query)
	for _, c := range cands {
		if dctx.Err() != nil {
			return nil, timeout()
		}
		text, ok := w.readCandidate(c)
		if !ok {
			continue
		}
		lineNo := 0
		for len(text) > 0 {
			lineNo++
			line := text
			if i := strings.IndexByte(text, '\n'); i >= 0 {
				line, text = text[:i], text[i+1:]
			} else {
				text = ""
			}
			line = strings.TrimSuffix(line, "\r")
			idx := strings.Index(line, r.Query)
			if idx < 0 {
				continue
			}
			if len(res.Matches) == maxResults {
				res.Truncated = true
				return res, nil
			}
			col0 := wire.UTF16Len(line[:idx])
			res.Matches = append(res.Matches, SearchMatch{
				Path: c, Line: lineNo, Column: col0 + 1, Text: matchWindow(line, col0, qUnits),
			})
		}
	}
	return res, nil
}

// searchCandidates collects rg's candidate list, at most 20000 names and 1 MiB of names.
func (w *Workspace) searchCandidates(ctx context.Context, scope string) ([]string, bool, error) {
	e, err := w.startEnum(ctx, scope, true)
	if err != nil {
		return nil, false, newErr(CodeSearchUnavailable, err.Error())
	}
	var cands []string
	total := 0
	for {
		b, err := e.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			e.stop(true)
			return nil, false, newErr(CodeSearchUnavailable, "cannot read ripgrep's output")
		}
		if len(cands) == maxSearchCandidate || total+len(b) > maxCandidateBytes {
			e.stop(true)
			return cands, true, nil
		}
		total += len(b)
		if c, ok := candidatePath(b, scope); ok {
			cands = append(cands, c)
		}
	}
	if err := e.stop(false); err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, newErr(CodeSearchUnavailable, err.Error())
	}
	return cands, false, nil
}

// candidatePath accepts a name from rg only if it is a normalised portable path inside scope; anything else
// (non-UTF-8, backslashes, odd spellings) cannot be addressed safely and is dropped.
func candidatePath(b []byte, scope string) (string, bool) {
	s := string(bytes.TrimPrefix(b, []byte("./")))
	c, err := cleanPath(s)
	if err != nil || c != s || c == "" || !within(c, scope) {
		return "", false
	}
	return c, true
}

// readCandidate reads a search candidate through the confined open, at most 1 MiB raw and decoded. Failures
// are skipped silently, as the spec requires for INVALID_PATH and READ_LIMIT_EXCEEDED.
func (w *Workspace) readCandidate(rel string) (string, bool) {
	f, si, err := w.openRegular(rel, true, CodeInvalidPath)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if si.size > maxContentBytes {
		return "", false
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxContentBytes+1))
	if err != nil || len(raw) > maxContentBytes {
		return "", false
	}
	text := decodeAll(raw)
	if len(text) > maxContentBytes {
		return "", false
	}
	return string(text), true
}

// matchWindow is the §9.4 text: at most 2000 UTF-16 units of line around the match, starting at
// min(max(0, col0 − floor((2000 − len(query))/2)), max(0, len(line) − 2000)), shrunk by one unit rather than
// split a surrogate pair at either end.
func matchWindow(line string, col0, qUnits int) string {
	if wire.UTF16Len(line) <= maxMatchTextUnits {
		return line
	}
	u := utf16.Encode([]rune(line))
	start := min(max(0, col0-(maxMatchTextUnits-qUnits)/2), max(0, len(u)-maxMatchTextUnits))
	end := min(len(u), start+maxMatchTextUnits)
	if start > 0 && utf16.IsSurrogate(rune(u[start])) && u[start] >= 0xDC00 {
		start++
	}
	if end < len(u) && u[end-1] >= 0xD800 && u[end-1] <= 0xDBFF {
		end--
	}
	return string(utf16.Decode(u[start:end]))
}
