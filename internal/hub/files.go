package hub

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/filestore"
	"github.com/codellm/codellm/internal/hub/store"
)

// The Code API file surface as LibreChat's client calls it (api/server/services/Files/Code/crud.js and
// process.js in danny-avila/LibreChat, CodeExecutor.ts in danny-avila/agents):
//
//   - POST /v1/upload, multipart/form-data with one or more "file" parts and an optional "entity_id"
//     (or kind/id/version/read_only) field → {"message":"success","storage_session_id","session_id",
//     "files":[{"fileId","filename"}]}; LibreChat keeps
//     "<session_id>/<fileId>" as the file's identifier. Each upload starts a new session unless the form
//     names one of the caller's sessions in "session_id".
//   - GET /v1/files/{session_id}?detail=summary → [{"name":"<session_id>/<fileId>","lastModified"}]
//     (LibreChat re-uploads a file whose lastModified is 23 hours old or that is missing); without detail
//     each entry also has id, session_id, filename, size, contentType and metadata.
//   - GET /v1/download/{session_id}/{fileId} → the bytes as stored.
//   - POST /v1/exec with files: [{id, name, session_id}] → written into the run's working directory
//     (/mnt/data) under name; the files the run creates come back as [{id, name, path, session_id}].
//
// The newer routes (batch upload, object metadata, delete, health) are in fileobjects.go. A session or
// file of another tenant answers exactly like an unknown one.

// execOutputPath is where a run's working directory is inside the sandbox (LibreChat's tool description
// tells models to save files there).
const execOutputPath = "/mnt/data/"

// Default caps of the file surface beyond filestore.Limits.
const (
	DefaultMaxExecInputBytes = 25 << 20  // input files of one /v1/exec, all together (§13.1)
	DefaultMaxUploadMemory   = 256 << 20 // upload bytes held in memory by all requests at once
	maxUploadParts           = 64
	uploadChunk              = 64 << 10 // an upload is read (and its memory taken) this much at a time
)

// uploadBudget bounds the upload bytes the hub holds in memory (issue 35 item 10: eight concurrent
// uploads took it from 14 to 998 MiB). A request takes memory as it reads and never waits for it, so
// two half-read uploads cannot wait on each other: one that finds the budget spent is refused.
type uploadBudget struct {
	mu        sync.Mutex
	max, left int64
}

func (b *uploadBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

func (b *uploadBudget) give(n int64) {
	b.mu.Lock()
	b.left += n
	b.mu.Unlock()
}

// held is the memory taken now (the metrics' and tests' view).
func (b *uploadBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max - b.left
}

func errUploadBusy() *clientError {
	return &clientError{status: http.StatusServiceUnavailable, code: "upload_busy", retryAfter: 1,
		message: "The hub holds as many upload bytes as it may (CODELLM_HUB_MAX_UPLOAD_MEMORY); retry shortly"}
}

func fileError(status int, code, msg string) *clientError {
	return &clientError{status: status, code: code, message: msg}
}

// storeError maps a file store failure to the client's error.
func (h *Hub) storeError(err error) *clientError {
	switch {
	case errors.Is(err, filestore.ErrFileTooLarge):
		return fileError(http.StatusRequestEntityTooLarge, "file_too_large", err.Error())
	case errors.Is(err, filestore.ErrTooManyFiles):
		return fileError(http.StatusRequestEntityTooLarge, "too_many_files", err.Error())
	case errors.Is(err, filestore.ErrSessionFull):
		return fileError(http.StatusRequestEntityTooLarge, "session_quota_exceeded", err.Error())
	case errors.Is(err, filestore.ErrTenantFull):
		return fileError(http.StatusRequestEntityTooLarge, "tenant_quota_exceeded",
			"This API key's tenant holds as many file bytes as it may (CODELLM_HUB_MAX_TENANT_FILE_BYTES); delete files or wait for sessions to expire")
	case errors.Is(err, filestore.ErrStoreFull):
		return fileError(http.StatusInsufficientStorage, "storage_full", "The hub's file store is full")
	case errors.Is(err, filestore.ErrInvalid):
		return fileError(http.StatusBadRequest, "invalid_request", strings.TrimPrefix(err.Error(), "filestore: invalid request: "))
	case errors.Is(err, filestore.ErrNotFound):
		return fileError(http.StatusNotFound, "file_not_found", "No such session or file")
	case errors.Is(err, store.ErrUnavailable):
		return errStoreUnavailable()
	}
	h.cfg.Logger.Error("file store failed", "err", err)
	return fileError(http.StatusInternalServerError, "internal_error", "File store failure")
}

// fileRoute serves /v1/upload[/batch], /v1/files/…, /v1/download/… and /v1/sessions/…/objects/…; it
// reports false for other paths.
func (h *Hub) fileRoute(w http.ResponseWriter, r *http.Request, p string) bool {
	allow, serve := h.fileHandler(w, r, p)
	if serve == nil {
		return false
	}
	method := r.Method
	if !slices.Contains(allow, method) {
		method = allow[0]
	}
	refuse := clientRefusals{method: func(w http.ResponseWriter) {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeExecError(w, &clientError{status: http.StatusMethodNotAllowed, code: "method_not_allowed"})
	}, auth: execRefusals.auth, limit: execRefusals.limit}
	h.clientRoute(method, refuse, func(w http.ResponseWriter, r *http.Request, key *ClientKey) {
		if h.cfg.Files == nil {
			writeExecError(w, fileError(http.StatusNotImplemented, "files_unavailable", "This hub has no file store"))
			return
		}
		if ce := h.admit(r.Context(), w, h.limits.forFile(p), key); ce != nil {
			writeFileLimit(w, ce)
			return
		}
		if e := serve(key); e != nil {
			writeExecError(w, e)
		}
	})(w, r)
	return true
}

// fileHandler picks the handler of a file path and the methods it answers (nil: no such route).
// GET and DELETE of one object share a path, as upstream mounts them.
func (h *Hub) fileHandler(w http.ResponseWriter, r *http.Request, p string) ([]string, func(*ClientKey) *clientError) {
	post, get, del := []string{http.MethodPost}, []string{http.MethodGet}, []string{http.MethodDelete}
	object := func(sid, fid string) func(*ClientKey) *clientError {
		return func(k *ClientKey) *clientError {
			if r.Method == http.MethodDelete {
				return h.handleDelete(w, r, k, sid, fid)
			}
			return h.handleObject(w, r, k, sid, fid)
		}
	}
	switch {
	case p == "/v1/upload":
		return post, func(k *ClientKey) *clientError { return h.handleUpload(w, r, k) }
	case p == "/v1/upload/batch":
		return post, func(k *ClientKey) *clientError { return h.handleBatchUpload(w, r, k) }
	case strings.HasPrefix(p, "/v1/files/"):
		if ids, ok := pathIDs(strings.TrimPrefix(p, "/v1/files/"), 2); ok {
			return del, object(ids[0], ids[1])
		}
		if sid, ok := pathIDs(strings.TrimPrefix(p, "/v1/files/"), 1); ok {
			return get, func(k *ClientKey) *clientError { return h.handleList(w, r, k, sid[0]) }
		}
	case strings.HasPrefix(p, "/v1/download/"):
		if ids, ok := pathIDs(strings.TrimPrefix(p, "/v1/download/"), 2); ok {
			return get, func(k *ClientKey) *clientError { return h.handleDownload(w, r, k, ids[0], ids[1]) }
		}
	case strings.HasPrefix(p, "/v1/sessions/"):
		if ids, ok := pathIDs(strings.TrimPrefix(p, "/v1/sessions/"), 3); ok && ids[1] == "objects" {
			return []string{http.MethodGet, http.MethodDelete}, object(ids[0], ids[2])
		}
	}
	return nil, nil
}

// pathIDs splits n slash-separated, unescaped path segments. Ids of the wrong shape are kept (they are
// answered 404 like unknown ones), but the segment count must match.
func pathIDs(rest string, n int) ([]string, bool) {
	parts := strings.Split(rest, "/")
	if len(parts) != n {
		return nil, false
	}
	for i, s := range parts {
		u, err := url.PathUnescape(s)
		if err != nil || u == "" {
			return nil, false
		}
		parts[i] = u
	}
	return parts, true
}

// handleUpload is POST /v1/upload. Every part is read (bounded) before anything is stored, and the
// batch is stored all or nothing. The answer names the session both as storage_session_id (what newer
// LibreChat reads; without it the next /v1/exec's file priming breaks) and as session_id (older ones).
func (h *Hub) handleUpload(w http.ResponseWriter, r *http.Request, key *ClientKey) *clientError {
	form, ce := h.readUploadRequest(w, r, false)
	defer form.release()
	if ce != nil {
		return ce
	}
	if len(form.files) == 0 {
		return fileError(http.StatusBadRequest, "invalid_request", `No file: send multipart/form-data with a "file" part`)
	}
	sid := form.sid
	if sid == "" {
		sid = filestore.NewID()
	} else if !filestore.ValidID(sid) {
		return fileError(http.StatusBadRequest, "invalid_request", "session_id must be 21 characters of [A-Za-z0-9_-]")
	}
	stored, err := h.cfg.Files.Put(r.Context(), key.TenantID, sid, form.files)
	if err != nil {
		return h.storeError(err)
	}
	files := make([]any, 0, len(stored))
	for _, f := range stored {
		o := &bridge.Object{}
		o.Set("fileId", f.ID)
		o.Set("filename", f.Name)
		files = append(files, o)
	}
	resp := &bridge.Object{}
	resp.Set("message", "success")
	resp.Set("storage_session_id", sid)
	resp.Set("session_id", sid)
	resp.Set("files", files)
	writeValue(w, http.StatusOK, resp)
	return nil
}

// readUploadRequest reads and checks an upload's multipart body: the files, and the fields that apply
// to all of them.
func (h *Hub) readUploadRequest(w http.ResponseWriter, r *http.Request, batch bool) (*uploadForm, *clientError) {
	mr, ce := multipartReader(r)
	if ce != nil {
		return &uploadForm{}, ce
	}
	limits := h.cfg.FileLimits
	// The whole body may not exceed what one session can hold, plus room for the part headers.
	r.Body = http.MaxBytesReader(w, r.Body, limits.MaxSessionBytes+1<<20)
	form := &uploadForm{batch: batch, budget: h.uploads}
	if ce := form.read(mr, limits); ce != nil {
		return form, ce
	}
	if ce := form.identity(); ce != nil {
		return form, ce
	}
	for i := range form.files {
		form.files[i].EntityID, form.files[i].ReadOnly = form.entity, form.readOnly
	}
	return form, nil
}

// uploadForm is what an upload's multipart body says. Upstream's fields: kind (skill, agent or user),
// id, version (a number, required for skill and refused otherwise) and read_only; older clients send
// entity_id instead of kind/id.
type uploadForm struct {
	batch                          bool
	files                          []filestore.Upload
	entries                        []batchEntry // batch: every file part in order, stored or refused
	skipped                        bool         // batch: file parts past maxBatchFiles were skipped
	entity, sid, kind, id, version string
	readOnly                       bool
	budget                         *uploadBudget
	held                           int64 // memory taken from budget, given back by release
}

// release gives back the memory the form's files took (they are stored, or refused, by then).
func (f *uploadForm) release() {
	if f.held > 0 {
		f.budget.give(f.held)
		f.held = 0
	}
}

// batchEntry is one file part of a batch: the index of its upload, or why it was refused.
type batchEntry struct {
	name   string
	upload int
	err    string
}

// maxBatchFiles is upstream's cap on a batch (a skill carries 60+ resource files).
const maxBatchFiles = 200

// read reads every part, bounded: the files (at most maxUploadParts, or maxBatchFiles in a batch,
// each checked by name and size) and the form's fields; other fields are skipped.
func (f *uploadForm) read(mr *multipart.Reader, limits filestore.Limits) *clientError {
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return uploadReadError(err)
		}
		if field := part.FormName(); part.FileName() != "" || field == "file" || field == "files" {
			err := f.readFile(part, limits.MaxFileBytes)
			if err != nil {
				return err
			}
		} else if ce := f.readField(part, field); ce != nil {
			return ce
		}
		part.Close()
	}
}

// readFile reads one file part. In a batch a part with a bad name or over the size cap is refused on
// its own and the rest go on, as upstream does; otherwise it refuses the whole upload.
func (f *uploadForm) readFile(part *multipart.Part, maxBytes int64) *clientError {
	if f.batch && len(f.entries) >= maxBatchFiles {
		f.skipped = true
		_, err := io.Copy(io.Discard, part)
		if err != nil {
			return uploadReadError(err)
		}
		return nil
	}
	if !f.batch && len(f.files) >= maxUploadParts {
		return fileError(http.StatusRequestEntityTooLarge, "too_many_files", fmt.Sprintf("At most %d files per upload", maxUploadParts))
	}
	up, ce := f.readUploadFile(part, maxBytes)
	if ce != nil && (!f.batch || ce.code == "request_too_large" || ce.code == "invalid_request") {
		return ce
	}
	if ce != nil {
		f.entries = append(f.entries, batchEntry{name: uploadName(partFileName(part), true), upload: -1, err: ce.message})
		return nil
	}
	f.entries = append(f.entries, batchEntry{name: up.Name, upload: len(f.files)})
	f.files = append(f.files, up)
	return nil
}

// readField reads one of the form's fields (at most 256 bytes); unknown fields are skipped.
func (f *uploadForm) readField(part *multipart.Part, field string) *clientError {
	dst := map[string]*string{"entity_id": &f.entity, "session_id": &f.sid, "kind": &f.kind, "id": &f.id, "version": &f.version}[field]
	var readOnly string
	if field == "read_only" {
		dst = &readOnly
	}
	if dst == nil {
		return nil
	}
	v, err := io.ReadAll(io.LimitReader(part, 257))
	if err != nil {
		return uploadReadError(err)
	}
	if len(v) > 256 {
		return fileError(http.StatusBadRequest, "invalid_request", field+" is longer than 256 bytes")
	}
	*dst = string(v)
	if field == "read_only" {
		f.readOnly = strings.EqualFold(readOnly, "true")
	}
	return nil
}

// identity checks kind/id/version by upstream's rules (parseUploadSessionKeyInput) and takes the
// entity a skill's or agent's files belong to. Without kind the upload is an older client's
// (entity_id alone).
func (f *uploadForm) identity() *clientError {
	bad := func(msg string) *clientError { return fileError(http.StatusBadRequest, "invalid_request", msg) }
	switch f.kind {
	case "":
		if f.version != "" {
			return bad("version needs kind: 'skill'")
		}
		return nil
	case "user":
	case "skill", "agent":
		if f.id == "" {
			return bad(fmt.Sprintf("id is required for kind: '%s'", f.kind))
		}
		f.entity = f.id
	default:
		return bad("kind must be one of: skill, agent, user")
	}
	if f.kind != "skill" {
		if f.version != "" {
			return bad(fmt.Sprintf("version is only allowed for kind: 'skill', not '%s'", f.kind))
		}
		return nil
	}
	if f.version == "" {
		return bad("version is required for kind: 'skill'")
	}
	if v, err := strconv.ParseFloat(f.version, 64); err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return bad("version must be a number for kind: 'skill'")
	}
	return nil
}

// readUploadFile reads one file part: a valid file name, at most maxBytes bytes. A batch keeps the
// part's directories (a skill's "pptx/editing.md", upstream's preservePath); a single upload takes the
// last element only.
func (f *uploadForm) readUploadFile(part *multipart.Part, maxBytes int64) (filestore.Upload, *clientError) {
	keepDirs := f.batch
	name := uploadName(partFileName(part), keepDirs)
	if msg := filestore.CheckName(name); msg != "" || (!keepDirs && strings.Contains(name, "/")) {
		if msg == "" {
			msg = "must not contain a slash"
		}
		return filestore.Upload{}, fileError(http.StatusBadRequest, "invalid_file_name", fmt.Sprintf("File name %q %s", name, msg))
	}
	data, ce := f.readData(part, maxBytes)
	if ce != nil {
		return filestore.Upload{}, ce
	}
	if data == nil {
		// Drain the rest so a batch can go on with the next part.
		if _, err := io.Copy(io.Discard, part); err != nil {
			return filestore.Upload{}, uploadReadError(err)
		}
		return filestore.Upload{}, fileError(http.StatusRequestEntityTooLarge, "file_too_large", fmt.Sprintf("%q is larger than %d bytes", name, maxBytes))
	}
	return filestore.Upload{Name: name, Data: data}, nil
}

// readData reads a part of at most maxBytes (nil when it is larger) in uploadChunk pieces, taking
// each piece's memory from the budget before reading it. The pieces are joined into one exact-size
// slice in exchange for their memory (the join briefly holds both, one file's worth).
func (f *uploadForm) readData(r io.Reader, maxBytes int64) ([]byte, *clientError) {
	var chunks [][]byte
	var size int64
	giveChunks := func() {
		f.budget.give(int64(len(chunks)) * uploadChunk)
		f.held -= int64(len(chunks)) * uploadChunk
	}
	for {
		if !f.budget.take(uploadChunk) {
			giveChunks()
			return nil, errUploadBusy()
		}
		f.held += uploadChunk
		c := make([]byte, uploadChunk)
		n, err := io.ReadFull(r, c)
		chunks, size = append(chunks, c[:n]), size+int64(n)
		if size > maxBytes {
			giveChunks()
			return nil, nil
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			giveChunks()
			return nil, uploadReadError(err)
		}
	}
	data := make([]byte, 0, size)
	for _, c := range chunks {
		data = append(data, c...)
	}
	giveChunks()
	if !f.budget.take(size) { // only when another upload took the memory the chunks gave back
		return nil, errUploadBusy()
	}
	f.held += size
	return data, nil
}

// uploadName takes the last path element of a client's file name (browsers on some systems send a
// full path), or with keepDirs only turns backslashes into slashes.
func uploadName(n string, keepDirs bool) string {
	if keepDirs {
		return strings.ReplaceAll(n, `\`, "/")
	}
	if i := strings.LastIndexAny(n, `/\`); i >= 0 {
		n = n[i+1:]
	}
	return n
}

// partFileName is the part's filename parameter as sent: Part.FileName drops its directories.
func partFileName(part *multipart.Part) string {
	if _, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition")); err == nil && params["filename"] != "" {
		return params["filename"]
	}
	return part.FileName()
}

func uploadReadError(err error) *clientError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fileError(http.StatusRequestEntityTooLarge, "request_too_large", "The upload is larger than a session may hold")
	}
	return fileError(http.StatusBadRequest, "invalid_request", "Malformed multipart body: "+err.Error())
}

// multipartReader accepts multipart/form-data with a boundary parameter, and — as LibreChat's client
// overrides the header with a bare "multipart/form-data" — without one, taking the boundary from the
// body's first line.
func multipartReader(r *http.Request) (*multipart.Reader, *clientError) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return nil, fileError(http.StatusUnsupportedMediaType, "unsupported_media_type", "Send multipart/form-data")
	}
	if b := params["boundary"]; b != "" {
		return multipart.NewReader(r.Body, b), nil
	}
	br := bufio.NewReaderSize(r.Body, 256)
	line, err := br.Peek(74)
	if err != nil && len(line) == 0 {
		return nil, fileError(http.StatusBadRequest, "invalid_request", "Empty multipart body")
	}
	if i := bytes.IndexByte(line, '\r'); i > 2 && bytes.HasPrefix(line, []byte("--")) {
		r.Body = io.NopCloser(br)
		return multipart.NewReader(br, string(line[2:i])), nil
	}
	return nil, fileError(http.StatusBadRequest, "invalid_request", "multipart/form-data without a boundary")
}

// handleList is GET /v1/files/{session_id}[?detail=summary].
func (h *Hub) handleList(w http.ResponseWriter, r *http.Request, key *ClientKey, sid string) *clientError {
	files, err := h.cfg.Files.List(r.Context(), key.TenantID, sid)
	if err != nil {
		return h.storeError(err)
	}
	summary := r.URL.Query().Get("detail") == "summary"
	out := make([]any, 0, len(files))
	for _, f := range files {
		o := &bridge.Object{}
		o.Set("name", f.SessionID+"/"+f.ID)
		o.Set("lastModified", f.Created.UTC().Format(time.RFC3339Nano))
		if !summary {
			o.Set("id", f.ID)
			o.Set("session_id", f.SessionID)
			o.Set("filename", f.Name)
			o.Set("size", float64(f.Size))
			o.Set("contentType", contentType(f.Name))
			md := &bridge.Object{}
			md.Set("original-filename", f.Name)
			if f.EntityID != "" {
				md.Set("entity_id", f.EntityID)
			}
			o.Set("metadata", md)
		}
		out = append(out, o)
	}
	b, err := bridge.Canonical(out)
	if err != nil {
		return h.storeError(err)
	}
	writeJSON(w, http.StatusOK, b)
	return nil
}

func contentType(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// handleDownload is GET /v1/download/{session_id}/{fileId}: the stored bytes, as an attachment.
func (h *Hub) handleDownload(w http.ResponseWriter, r *http.Request, key *ClientKey, sid, fid string) *clientError {
	f, data, err := h.cfg.Files.Get(r.Context(), key.TenantID, sid, fid)
	if err != nil {
		return h.storeError(err)
	}
	hd := w.Header()
	hd.Set("Content-Type", contentType(f.Name))
	hd.Set("Content-Length", strconv.Itoa(len(data)))
	hd.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(f.Name)}))
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Last-Modified", f.Created.UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(data)
	}
	return nil
}

// fileRef is one entry of /v1/exec's files.
type fileRef struct {
	ID               string `json:"id"`
	Name             string `json:"name"`
	SessionID        string `json:"session_id"`
	StorageSessionID string `json:"storage_session_id"` // newer clients' spelling of session_id
}

// execInputs resolves /v1/exec's file references into runner files {name, content, encoding:"base64"}.
// Names follow LibreChat's runner: a leading "./" is dropped, and a later file of the same name replaces
// an earlier one; entry is the code file's name, which no input may replace. readOnly names the inputs
// uploaded read_only (a skill's files): a run may change them on disk, but the change is not kept.
func (h *Hub) execInputs(ctx context.Context, key *ClientKey, raw []json.RawMessage, entry string) (files []any, readOnly []string, ce *clientError) {
	if len(raw) == 0 {
		return nil, nil, nil
	}
	if h.cfg.Files == nil {
		return nil, nil, fileError(http.StatusBadRequest, "invalid_request", "file references need a hub file store")
	}
	type input struct {
		name     string
		data     []byte
		readOnly bool
	}
	var inputs []input
	var total int64
	for i, m := range raw {
		var ref fileRef
		if err := json.Unmarshal(m, &ref); err != nil {
			return nil, nil, fileError(http.StatusBadRequest, "invalid_request", fmt.Sprintf("files[%d] must be {id, name, session_id}", i))
		}
		if ref.SessionID == "" {
			ref.SessionID = ref.StorageSessionID
		}
		f, data, err := h.cfg.Files.Get(ctx, key.TenantID, ref.SessionID, ref.ID)
		if errors.Is(err, filestore.ErrNotFound) {
			return nil, nil, fileError(http.StatusBadRequest, "file_not_found", fmt.Sprintf("files[%d]: no file %q in session %q", i, ref.ID, ref.SessionID))
		}
		if err != nil {
			return nil, nil, h.storeError(err)
		}
		name := ref.Name
		if name == "" {
			name = f.Name
		}
		for strings.HasPrefix(name, "./") {
			name = name[2:]
		}
		name = strings.TrimPrefix(name, execOutputPath)
		if msg := filestore.CheckName(name); msg != "" {
			return nil, nil, fileError(http.StatusBadRequest, "invalid_file_name", fmt.Sprintf("files[%d]: name %q %s", i, name, msg))
		}
		if name == entry {
			return nil, nil, fileError(http.StatusBadRequest, "invalid_file_name", fmt.Sprintf("files[%d]: %q is the name of the code file", i, name))
		}
		if total += int64(len(data)); total > h.cfg.MaxExecInputBytes {
			return nil, nil, fileError(http.StatusRequestEntityTooLarge, "files_too_large", fmt.Sprintf("input files exceed %d bytes in total", h.cfg.MaxExecInputBytes))
		}
		for j := range inputs {
			if inputs[j].name == name {
				inputs = append(inputs[:j], inputs[j+1:]...)
				break
			}
		}
		inputs = append(inputs, input{name, data, f.ReadOnly})
	}
	out := make([]any, 0, len(inputs))
	for _, in := range inputs {
		o := &bridge.Object{}
		o.Set("name", in.name)
		o.Set("content", base64.StdEncoding.EncodeToString(in.data))
		o.Set("encoding", "base64")
		out = append(out, o)
		if in.readOnly {
			readOnly = append(readOnly, in.name)
		}
	}
	return out, readOnly, nil
}

// skipOutput reports whether a generated file is an interpreter byproduct or hidden: a component
// starting with ".", __pycache__, or compiled Python.
func skipOutput(name string) bool {
	for _, c := range strings.Split(name, "/") {
		if strings.HasPrefix(c, ".") || c == "__pycache__" || c == "node_modules" {
			return true
		}
	}
	return strings.HasSuffix(name, ".pyc") || strings.HasSuffix(name, ".pyo")
}

// keepOutputs stores the files a run reported (runner "files": {name, encoding:"base64", content}) in
// the exec session and returns their references. Files the runner could not return (content_omitted),
// or that the session cannot hold, are named in notes instead. A changed read-only input is dropped
// (upstream's never-emit-back rule for skill files).
func (h *Hub) keepOutputs(ctx context.Context, key *ClientKey, sid string, result *bridge.Object, readOnly []string) (refs []any, notes []string) {
	v, _ := result.Get("files")
	list, _ := v.([]any)
	if h.cfg.Files == nil || len(list) == 0 {
		return nil, nil
	}
	var uploads []filestore.Upload
	for _, item := range list {
		o, ok := item.(*bridge.Object)
		if !ok {
			continue
		}
		nv, _ := o.Get("name")
		name, _ := nv.(string)
		if name == "" || skipOutput(name) || filestore.CheckName(name) != "" || slices.Contains(readOnly, name) {
			continue
		}
		cv, _ := o.Get("content")
		content, ok := cv.(string)
		if !ok {
			notes = append(notes, fmt.Sprintf("%s was not kept: it is larger than the worker returns", name))
			continue
		}
		data, err := base64.StdEncoding.DecodeString(content)
		if ev, _ := o.Get("encoding"); ev != "base64" || err != nil {
			continue
		}
		uploads = append(uploads, filestore.Upload{Name: name, Data: data})
	}
	if len(uploads) == 0 {
		return nil, notes
	}
	stored, err := h.cfg.Files.Put(ctx, key.TenantID, sid, uploads)
	if err != nil {
		ce := h.storeError(err)
		return nil, append(notes, fmt.Sprintf("%d generated file(s) were not kept: %s", len(uploads), ce.message))
	}
	for _, f := range stored {
		o := &bridge.Object{}
		o.Set("id", f.ID)
		o.Set("name", f.Name)
		o.Set("path", execOutputPath+f.Name)
		o.Set("session_id", sid)
		refs = append(refs, o)
	}
	return refs, nil
}
