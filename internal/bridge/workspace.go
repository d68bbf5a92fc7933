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
		_, hasOld := o.Get("oldText")
		_, hasNew := o.Get("newText")
		ev, hasEdits := o.Get("edits")
		switch {
		case hasEdits && !hasOld && !hasNew:
			arr, ok := ev.([]any)
			if !ok || len(arr) < 1 || len(arr) > MaxEdits {
				f.bad = true
				break
			}
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

// ValidateWorkspaceResult re-validates a fulfilled result against its request
// (§9.3–§9.8); afterPathNegotiated is whether the worker registered
// listFileFeatures ["after_path"]. Unknown keys are rejected.
func ValidateWorkspaceResult(req *WorkspaceRequest, res *Object, afterPathNegotiated bool) bool {
	f := &fieldReader{o: res}
	op, _ := f.str("operation", true)
	ws, _ := f.str("workspaceId", true)
	if !CheckVersion(res) || f.bad || op != req.Operation || ws != req.WorkspaceID {
		return false
	}
	common := []string{"protocolVersion", "operation", "workspaceId"}
	num := func(key string) (int, bool) {
		v, ok := res.Get(key)
		n, isNum := v.(float64)
		if !ok || !isNum || !IsSafeInteger(n) || n < 0 {
			return 0, false
		}
		return int(n), true
	}
	flag := func(key string) (bool, bool) {
		v, ok := res.Get(key)
		b, isBool := v.(bool)
		return b, ok && isBool
	}
	pathOK := func() bool {
		p, ok := f.str("path", true)
		_, valid := NormalisePortablePath(p)
		return ok && valid
	}
	switch req.Operation {
	case "read_file":
		f.allow(append(common, "path", "content", "startLine", "endLine", "truncated", "nextStartLine")...)
		content, ok1 := f.str("content", true)
		start, ok2 := num("startLine")
		end, ok3 := num("endLine")
		trunc, ok4 := flag("truncated")
		if !pathOK() || !ok1 || !ok2 || !ok3 || !ok4 || start != req.StartLine || end < start-1 || end >= start+req.MaxLines {
			return false
		}
		lines := end - start + 1
		if content == "" {
			if lines > 1 {
				return false
			}
		} else if strings.Count(content, "\n")+1 != lines {
			return false
		}
		next, hasNext := res.Get("nextStartLine")
		if hasNext != trunc {
			return false
		}
		if hasNext {
			n, isNum := next.(float64)
			if !isNum || !IsSafeInteger(n) || int(n) <= start {
				return false
			}
		}
	case "search_text":
		f.allow(append(common, "matches", "truncated")...)
		v, _ := res.Get("matches")
		arr, ok := v.([]any)
		if _, tok := flag("truncated"); !ok || !tok || len(arr) > req.MaxResults {
			return false
		}
		for _, m := range arr {
			mo, ok := m.(*Object)
			if !ok {
				return false
			}
			mf := &fieldReader{o: mo}
			mf.allow("path", "line", "column", "text")
			p, _ := mf.str("path", true)
			text, _ := mf.str("text", true)
			line, _ := mo.Get("line")
			col, _ := mo.Get("column")
			ln, ok1 := line.(float64)
			cn, ok2 := col.(float64)
			if _, valid := NormalisePortablePath(p); mf.bad || !valid || !ok1 || !ok2 || !IsSafeInteger(ln) || ln < 1 ||
				!IsSafeInteger(cn) || cn < 1 || jsLen(text) > MaxMatchText || !strings.Contains(text, req.Query) {
				return false
			}
		}
	case "list_files":
		f.allow(append(common, "paths", "truncated", "nextAfterPath")...)
		v, _ := res.Get("paths")
		arr, ok := v.([]any)
		trunc, tok := flag("truncated")
		if !ok || !tok || len(arr) > req.MaxResults {
			return false
		}
		prev := req.AfterPath
		for i, p := range arr {
			s, ok := p.(string)
			if !ok {
				return false
			}
			if afterPathNegotiated {
				n, valid := NormalisePortablePath(s)
				if !valid || n != s || ((i > 0 || req.HasAfterPath) && ComparePaths(prev, s) >= 0) {
					return false
				}
				prev = s
			}
		}
		next, hasNext := f.str("nextAfterPath", false)
		if hasNext {
			if !afterPathNegotiated || !trunc || len(arr) == 0 || next != arr[len(arr)-1] {
				return false
			}
		}
	case "write_file":
		f.allow(append(common, "path", "created", "bytesWritten")...)
		created, ok1 := flag("created")
		n, ok2 := num("bytesWritten")
		if !pathOK() || !ok1 || !ok2 || n != len(req.Content) || (req.NoOverwrite && !created) {
			return false
		}
	case "edit_file":
		f.allow(append(common, "path", "replacements", "bytesWritten")...)
		rep, ok1 := num("replacements")
		_, ok2 := num("bytesWritten")
		if !pathOK() || !ok1 || !ok2 || rep != req.EditCount {
			return false
		}
	case "preview_edit":
		f.allow(append(common, "path", "content", "hasUtf8Bom", "baseSha256", "replacements", "bytesWritten")...)
		content, ok1 := f.str("content", true)
		bom, ok2 := flag("hasUtf8Bom")
		base, ok3 := f.str("baseSha256", true)
		rep, ok4 := num("replacements")
		n, ok5 := num("bytesWritten")
		want := len(content)
		if bom {
			want += 3
		}
		if !pathOK() || !ok1 || !ok2 || !ok3 || !hexDigestRe.MatchString(base) || !ok4 || rep != req.EditCount || !ok5 || n != want {
			return false
		}
	case "execute_command":
		f.allow(append(common, "exitCode", "signal", "stdout", "stderr", "truncated", "timedOut")...)
		stdout, ok1 := f.str("stdout", true)
		stderr, ok2 := f.str("stderr", true)
		_, ok3 := flag("truncated")
		timedOut, ok4 := flag("timedOut")
		ev, hasExit := res.Get("exitCode")
		sig, hasSig := f.str("signal", false)
		if !ok1 || !ok2 || !ok3 || !ok4 || !hasExit || len(stdout)+len(stderr) > req.MaxOutputBytes {
			return false
		}
		if hasSig && (!signalRe.MatchString(sig) || len(sig) > 32 || timedOut) {
			return false
		}
		if ev == nil {
			if !timedOut && !hasSig {
				return false
			}
		} else {
			code, isNum := ev.(float64)
			if !isNum || !IsSafeInteger(code) || code < 0 || code > 255 || timedOut || hasSig {
				return false
			}
		}
	}
	return !f.bad
}
