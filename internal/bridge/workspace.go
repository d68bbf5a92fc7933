package bridge

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Workspace tool requests and results (§9). Both ends run these validators:
// the hub before dispatching (ASSIGNMENT_INVALID, WORKER_MISMATCH) and on the
// settled result (RESULT_INVALID), the worker on what it executes and returns.

// Workspace tool limits of §9.2.
const (
	MaxPortablePath      = 4096    // UTF-16 units
	MaxSearchQueryUnits  = 4096    // UTF-16 units
	MaxSearchQueryBytes  = 2000    // UTF-8 bytes
	MaxMatchText         = 2000    // UTF-16 units
	MaxWriteContent      = 1 << 20 // bytes
	MaxEdits             = 100
	MaxCommandBytes      = 32 << 10
	MaxCommandTimeoutMs  = 300000
	MaxCommandOutput     = 1 << 20
	DefaultReadMaxLines  = 200
	DefaultSearchResults = 50
	DefaultListResults   = 100
)

var (
	errWorkspaceRequest = Errorf(http.StatusBadRequest, "Invalid workspace tool request")
	signalRe            = regexp.MustCompile(`^SIG[A-Z0-9]+$`)
	driveRe             = regexp.MustCompile(`^[A-Za-z]:`)
)

// WorkspaceRequest is a validated §9 request: the fields that routing and
// negotiation need, plus the request tree itself.
type WorkspaceRequest struct {
	Operation   string
	WorkspaceID string
	Path        string // normalised; "" for the root or when absent
	// Negotiated features the request uses (§8.2).
	NoOverwrite        bool // write_file overwrite:false needs "create"
	Batch              bool // edits[] needs "batch"
	ExpectedBaseSHA256 bool // needs "expected_base_sha256"
	AfterPath          string
	HasAfterPath       bool // needs "after_path"
	// Effective limits, for result checks.
	StartLine, MaxLines, MaxResults, EditCount int
	MaxOutputBytes                             int
	Query, Content                             string
	Tree                                       *Object
}

// NormalisePortablePath checks §9.1's portable path rules and returns the
// path with "." and empty segments removed.
func NormalisePortablePath(p string) (string, bool) {
	n := jsLen(p)
	if n < 1 || n > MaxPortablePath || !utf8.ValidString(p) || strings.HasPrefix(p, "/") ||
		strings.ContainsAny(p, "\\\x00") || driveRe.MatchString(p) {
		return "", false
	}
	var segs []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "..":
			return "", false
		case "", ".":
			continue
		}
		segs = append(segs, s)
	}
	return strings.Join(segs, "/"), true
}

// ComparePaths orders normalised paths as list_files does (§9.5): segment by
// segment as UTF-8 bytes, a prefix first; fewer segments first on a tie.
func ComparePaths(a, b string) int {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(as) && i < len(bs); i++ {
		if c := strings.Compare(as[i], bs[i]); c != 0 {
			return c
		}
	}
	return len(as) - len(bs)
}

type fieldReader struct {
	o   *Object
	bad bool
}

func (f *fieldReader) allow(keys ...string) {
	for _, m := range f.o.Members {
		if !slices.Contains(keys, m.Key) {
			f.bad = true
		}
	}
}

func (f *fieldReader) str(key string, required bool) (string, bool) {
	v, ok := f.o.Get(key)
	if !ok {
		if required {
			f.bad = true
		}
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		f.bad = true
	}
	return s, isStr
}

func (f *fieldReader) integer(key string, lo, hi, def int) int {
	v, ok := f.o.Get(key)
	if !ok {
		return def
	}
	n, isNum := v.(float64)
	if !isNum || !IsSafeInteger(n) || n < float64(lo) || n > float64(hi) {
		f.bad = true
		return def
	}
	return int(n)
}

func (f *fieldReader) boolean(key string, def bool) bool {
	v, ok := f.o.Get(key)
	if !ok {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		f.bad = true
	}
	return b
}

func (f *fieldReader) path(key string, required bool) (string, bool) {
	s, ok := f.str(key, required)
	if !ok {
		return "", false
	}
	n, valid := NormalisePortablePath(s)
	if !valid {
		f.bad = true
	}
	return n, true
}

// ValidateWorkspaceRequest checks a §9 request. Unknown keys are rejected.
func ValidateWorkspaceRequest(o *Object) (*WorkspaceRequest, error) {
	f := &fieldReader{o: o}
	op, _ := f.str("operation", true)
	ws, _ := f.str("workspaceId", true)
	if !CheckVersion(o) || f.bad || !slices.Contains(WorkspaceOperations, op) || !ValidWorkerID(ws) {
		return nil, errWorkspaceRequest
	}
	r := &WorkspaceRequest{Operation: op, WorkspaceID: ws, Tree: o}
	common := []string{"protocolVersion", "operation", "workspaceId"}
	switch op {
	case "read_file":
		f.allow(append(common, "path", "startLine", "maxLines")...)
		r.Path, _ = f.path("path", true)
		r.StartLine = f.integer("startLine", 1, MaxSafeInteger, 1)
		r.MaxLines = f.integer("maxLines", 1, 500, DefaultReadMaxLines)
	case "search_text":
		f.allow(append(common, "query", "path", "maxResults")...)
		r.Query, _ = f.str("query", true)
		if n := jsLen(r.Query); n < 1 || n > MaxSearchQueryUnits || len(r.Query) > MaxSearchQueryBytes || strings.ContainsAny(r.Query, "\x00\r\n") {
			f.bad = true
		}
		r.Path, _ = f.path("path", false)
		r.MaxResults = f.integer("maxResults", 1, 200, DefaultSearchResults)
	case "list_files":
		f.allow(append(common, "path", "maxResults", "afterPath")...)
		r.Path, _ = f.path("path", false)
		r.MaxResults = f.integer("maxResults", 1, 500, DefaultListResults)
		if raw, ok := f.str("afterPath", false); ok {
			n, valid := NormalisePortablePath(raw)
			if !valid || n != raw || (r.Path != "" && !strings.HasPrefix(n, r.Path+"/")) {
				f.bad = true
			}
			r.AfterPath, r.HasAfterPath = n, true
		}
	case "write_file":
		f.allow(append(common, "path", "content", "overwrite")...)
		r.Path, _ = f.path("path", true)
		r.Content, _ = f.str("content", true)
		if len(r.Content) > MaxWriteContent {
			f.bad = true
		}
		r.NoOverwrite = !f.boolean("overwrite", true)
	case "edit_file", "preview_edit":
		keys := append(common, "path", "oldText", "newText", "edits")
		if op == "edit_file" {
			keys = append(keys, "expectedBaseSha256")
		}
		f.allow(keys...)
		r.Path, _ = f.path("path", true)
		f.edits(r)
	case "execute_command":
		f.allow(append(common, "command", "cwd", "timeoutMs", "maxOutputBytes")...)
		cmd, _ := f.str("command", true)
		if strings.TrimSpace(cmd) == "" || len(cmd) > MaxCommandBytes || strings.ContainsRune(cmd, 0) {
			f.bad = true
		}
		r.Path, _ = f.path("cwd", false)
		f.integer("timeoutMs", 1, MaxCommandTimeoutMs, 30000)
		r.MaxOutputBytes = f.integer("maxOutputBytes", 1, MaxCommandOutput, 262144)
	}
	if f.bad {
		return nil, errWorkspaceRequest
	}
	return r, nil
}

// edits reads an edit_file or preview_edit request's edits (oldText/newText, or a batch in edits) and
// expectedBaseSha256 into r.
func (f *fieldReader) edits(r *WorkspaceRequest) {
	_, hasOld := f.o.Get("oldText")
	_, hasNew := f.o.Get("newText")
	ev, hasEdits := f.o.Get("edits")
	switch {
	case hasEdits && !hasOld && !hasNew:
		arr, ok := ev.([]any)
		if !ok || len(arr) < 1 || len(arr) > MaxEdits {
			f.bad = true
			break
		}
		f.batch(arr)
		r.Batch, r.EditCount = true, len(arr)
	case !hasEdits && hasOld && hasNew:
		ot, _ := f.str("oldText", true)
		nt, _ := f.str("newText", true)
		if ot == "" || len(ot) > MaxWriteContent || len(nt) > MaxWriteContent {
			f.bad = true
		}
		r.EditCount = 1
	default:
		f.bad = true
	}
	if s, ok := f.str("expectedBaseSha256", false); ok {
		if !hexDigestRe.MatchString(strings.ToLower(s)) || len(s) != 64 {
			f.bad = true
		}
		r.ExpectedBaseSHA256 = true
	}
}

// batch checks a batch of edits: objects of a non-empty oldText and a newText, at most MaxWriteContent
// bytes together.
func (f *fieldReader) batch(arr []any) {
	total := 0
	for _, e := range arr {
		eo, ok := e.(*Object)
		if !ok {
			f.bad = true
			break
		}
		ef := &fieldReader{o: eo}
		ef.allow("oldText", "newText")
		ot, _ := ef.str("oldText", true)
		nt, _ := ef.str("newText", true)
		total += len(ot) + len(nt)
		if ef.bad || ot == "" {
			f.bad = true
		}
	}
	if total > MaxWriteContent {
		f.bad = true
	}
}

// AllowsRequest reports whether the active capabilities advertise everything
// the request uses: the operation on that workspace and every negotiated mode
// and feature (§8.2). A hub answers WORKER_MISMATCH, a worker INVALID_REQUEST.
func (c *Capabilities) AllowsRequest(r *WorkspaceRequest) bool {
	if !c.Allows(r.WorkspaceID, r.Operation) {
		return false
	}
	wt := c.WorkspaceTools
	if r.NoOverwrite && !slices.Contains(wt.WriteFileModes, "create") {
		return false
	}
	if r.Batch && !slices.Contains(wt.EditFileModes, "batch") {
		return false
	}
	if r.ExpectedBaseSHA256 && !slices.Contains(wt.EditFileFeatures, "expected_base_sha256") {
		return false
	}
	if r.HasAfterPath && !slices.Contains(wt.ListFileFeatures, "after_path") {
		return false
	}
	return true
}
