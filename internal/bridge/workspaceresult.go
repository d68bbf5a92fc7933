package bridge

import "strings"

// ValidateWorkspaceResult re-validates a fulfilled result against its request
// (§9.3–§9.8); afterPathNegotiated is whether the worker registered
// listFileFeatures ["after_path"]. Unknown keys are rejected.
func ValidateWorkspaceResult(req *WorkspaceRequest, res *Object, afterPathNegotiated bool) bool {
	r := &resultReader{fieldReader: fieldReader{o: res}, req: req}
	op, _ := r.str("operation", true)
	ws, _ := r.str("workspaceId", true)
	if !CheckVersion(res) || r.bad || op != req.Operation || ws != req.WorkspaceID {
		return false
	}
	var ok bool
	switch req.Operation {
	case "read_file":
		ok = r.readFile()
	case "search_text":
		ok = r.searchText()
	case "list_files":
		ok = r.listFiles(afterPathNegotiated)
	case "write_file":
		ok = r.writeFile()
	case "edit_file":
		ok = r.editFile()
	case "preview_edit":
		ok = r.previewEdit()
	case "execute_command":
		ok = r.executeCommand()
	default:
		ok = true
	}
	return ok && !r.bad
}

// resultReader reads one workspace result against its request; each operation's method checks the
// result's members and their consistency with the request.
type resultReader struct {
	fieldReader
	req *WorkspaceRequest
}

// allow admits the members every result has plus keys.
func (r *resultReader) allow(keys ...string) {
	r.fieldReader.allow(append([]string{"protocolVersion", "operation", "workspaceId"}, keys...)...)
}

// num is a non-negative safe integer member.
func (r *resultReader) num(key string) (int, bool) {
	v, ok := r.o.Get(key)
	n, isNum := v.(float64)
	if !ok || !isNum || !IsSafeInteger(n) || n < 0 {
		return 0, false
	}
	return int(n), true
}

// flag is a boolean member.
func (r *resultReader) flag(key string) (bool, bool) {
	v, ok := r.o.Get(key)
	b, isBool := v.(bool)
	return b, ok && isBool
}

// pathOK reports whether the required path member is a portable path.
func (r *resultReader) pathOK() bool {
	p, ok := r.str("path", true)
	_, valid := NormalisePortablePath(p)
	return ok && valid
}

func (r *resultReader) readFile() bool {
	r.allow("path", "content", "startLine", "endLine", "truncated", "nextStartLine")
	content, ok1 := r.str("content", true)
	start, ok2 := r.num("startLine")
	end, ok3 := r.num("endLine")
	trunc, ok4 := r.flag("truncated")
	if !r.pathOK() || !ok1 || !ok2 || !ok3 || !ok4 || start != r.req.StartLine || end < start-1 || end >= start+r.req.MaxLines {
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
	next, hasNext := r.o.Get("nextStartLine")
	if hasNext != trunc {
		return false
	}
	if hasNext {
		n, isNum := next.(float64)
		if !isNum || !IsSafeInteger(n) || int(n) <= start {
			return false
		}
	}
	return true
}

func (r *resultReader) searchText() bool {
	r.allow("matches", "truncated")
	v, _ := r.o.Get("matches")
	arr, ok := v.([]any)
	if _, tok := r.flag("truncated"); !ok || !tok || len(arr) > r.req.MaxResults {
		return false
	}
	for _, m := range arr {
		if mo, ok := m.(*Object); !ok || !validMatch(mo, r.req.Query) {
			return false
		}
	}
	return true
}

// validMatch checks one search_text match: a portable path, 1-based line and column, and bounded text
// containing the query.
func validMatch(mo *Object, query string) bool {
	mf := &fieldReader{o: mo}
	mf.allow("path", "line", "column", "text")
	p, _ := mf.str("path", true)
	text, _ := mf.str("text", true)
	line, _ := mo.Get("line")
	col, _ := mo.Get("column")
	ln, ok1 := line.(float64)
	cn, ok2 := col.(float64)
	_, valid := NormalisePortablePath(p)
	return !mf.bad && valid && ok1 && ok2 && IsSafeInteger(ln) && ln >= 1 &&
		IsSafeInteger(cn) && cn >= 1 && jsLen(text) <= MaxMatchText && strings.Contains(text, query)
}

func (r *resultReader) listFiles(afterPathNegotiated bool) bool {
	r.allow("paths", "truncated", "nextAfterPath")
	v, _ := r.o.Get("paths")
	arr, ok := v.([]any)
	trunc, tok := r.flag("truncated")
	if !ok || !tok || len(arr) > r.req.MaxResults {
		return false
	}
	prev := r.req.AfterPath
	for i, p := range arr {
		s, ok := p.(string)
		if !ok {
			return false
		}
		if afterPathNegotiated {
			n, valid := NormalisePortablePath(s)
			if !valid || n != s || ((i > 0 || r.req.HasAfterPath) && ComparePaths(prev, s) >= 0) {
				return false
			}
			prev = s
		}
	}
	next, hasNext := r.str("nextAfterPath", false)
	return !hasNext || (afterPathNegotiated && trunc && len(arr) > 0 && next == arr[len(arr)-1])
}

func (r *resultReader) writeFile() bool {
	r.allow("path", "created", "bytesWritten")
	created, ok1 := r.flag("created")
	n, ok2 := r.num("bytesWritten")
	return r.pathOK() && ok1 && ok2 && n == len(r.req.Content) && (!r.req.NoOverwrite || created)
}

func (r *resultReader) editFile() bool {
	r.allow("path", "replacements", "bytesWritten")
	rep, ok1 := r.num("replacements")
	_, ok2 := r.num("bytesWritten")
	return r.pathOK() && ok1 && ok2 && rep == r.req.EditCount
}

func (r *resultReader) previewEdit() bool {
	r.allow("path", "content", "hasUtf8Bom", "baseSha256", "replacements", "bytesWritten")
	content, ok1 := r.str("content", true)
	bom, ok2 := r.flag("hasUtf8Bom")
	base, ok3 := r.str("baseSha256", true)
	rep, ok4 := r.num("replacements")
	n, ok5 := r.num("bytesWritten")
	want := len(content)
	if bom {
		want += 3
	}
	return r.pathOK() && ok1 && ok2 && ok3 && hexDigestRe.MatchString(base) && ok4 && rep == r.req.EditCount && ok5 && n == want
}

func (r *resultReader) executeCommand() bool {
	r.allow("exitCode", "signal", "stdout", "stderr", "truncated", "timedOut")
	stdout, ok1 := r.str("stdout", true)
	stderr, ok2 := r.str("stderr", true)
	_, ok3 := r.flag("truncated")
	timedOut, ok4 := r.flag("timedOut")
	ev, hasExit := r.o.Get("exitCode")
	sig, hasSig := r.str("signal", false)
	if !ok1 || !ok2 || !ok3 || !ok4 || !hasExit || len(stdout)+len(stderr) > r.req.MaxOutputBytes {
		return false
	}
	if hasSig && (!signalRe.MatchString(sig) || len(sig) > 32 || timedOut) {
		return false
	}
	if ev == nil {
		return timedOut || hasSig
	}
	code, isNum := ev.(float64)
	return isNum && IsSafeInteger(code) && code >= 0 && code <= 255 && !timedOut && !hasSig
}
