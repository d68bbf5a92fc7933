package hub

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"net/http"
	"path"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/filestore"
)

// The newer Code API file routes, as LibreChat-AI/code-interpreter's service/src/service/router.ts and
// file-server.ts answer them:
//
//   - POST /v1/upload/batch: up to maxBatchFiles files (a skill's bundle, with kind/id/version and
//     read_only) into a new session; a file that cannot be taken is refused on its own →
//     {message: success|partial_success|error, storage_session_id, files: [{status, filename, fileId} |
//     {status: "error", filename, error}], succeeded, failed[, filesLimitReached, maxFiles]}, 400 when
//     none was taken.
//   - GET /v1/sessions/{sid}/objects/{fid}: one file's metadata, whose lastModified LibreChat's
//     primeSkillFiles reads to decide whether a skill must be uploaded again.
//   - DELETE /v1/files/{sid}/{fid} and DELETE /v1/sessions/{sid}/objects/{fid} (the older clients'
//     path): {message: "File deleted successfully", session_id, fileId}, 404 when already gone.
//   - GET /v1/health: 200 "OK" while the hub's store answers, 503 otherwise; no key needed.

// handleBatchUpload is POST /v1/upload/batch. The files that pass their checks are stored together
// (all or nothing: a session cap refuses the batch).
func (h *Hub) handleBatchUpload(w http.ResponseWriter, r *http.Request, key *ClientKey) *clientError {
	form, ce := h.readUploadRequest(w, r, true)
	defer form.release()
	if ce != nil {
		return ce
	}
	if len(form.entries) == 0 {
		return fileError(http.StatusBadRequest, "invalid_request", "No files provided")
	}
	sid := filestore.NewID()
	var stored []filestore.File
	if len(form.files) > 0 {
		var err error
		if stored, err = h.cfg.Files.Put(r.Context(), key.TenantID, sid, form.files); err != nil {
			return h.storeError(err)
		}
	}
	files := make([]any, 0, len(form.entries))
	for _, e := range form.entries {
		o := &bridge.Object{}
		if e.upload < 0 {
			o.Set("status", "error")
			o.Set("filename", e.name)
			o.Set("error", e.err)
		} else {
			o.Set("status", "success")
			o.Set("filename", stored[e.upload].Name)
			o.Set("fileId", stored[e.upload].ID)
		}
		files = append(files, o)
	}
	succeeded, failed := len(stored), len(form.entries)-len(stored)
	message, status := "success", http.StatusOK
	switch {
	case succeeded == 0:
		message, status = "error", http.StatusBadRequest
	case failed > 0:
		message = "partial_success"
	}
	resp := &bridge.Object{}
	resp.Set("message", message)
	resp.Set("storage_session_id", sid)
	resp.Set("files", files)
	resp.Set("succeeded", float64(succeeded))
	resp.Set("failed", float64(failed))
	if form.skipped {
		resp.Set("filesLimitReached", true)
		resp.Set("maxFiles", float64(maxBatchFiles))
	}
	writeValue(w, status, resp)
	return nil
}

// handleObject is GET /v1/sessions/{sid}/objects/{fid}: the file-server's metadata shape. Files are
// immutable once stored, so the file id is its version and the MD5 of its bytes its etag (as S3
// reports for a single-part object).
func (h *Hub) handleObject(w http.ResponseWriter, r *http.Request, key *ClientKey, sid, fid string) *clientError {
	f, data, err := h.cfg.Files.Get(r.Context(), key.TenantID, sid, fid)
	if err != nil {
		return h.storeError(err)
	}
	sum := md5.Sum(data)
	o := &bridge.Object{}
	o.Set("name", sid+"/"+fid+path.Ext(f.Name))
	o.Set("version", f.ID)
	o.Set("originalFilename", f.Name)
	o.Set("size", float64(f.Size))
	o.Set("lastModified", f.Created.UTC().Format("2006-01-02T15:04:05.000Z"))
	o.Set("etag", hex.EncodeToString(sum[:]))
	o.Set("contentType", contentType(f.Name))
	o.Set("readOnly", f.ReadOnly)
	writeValue(w, http.StatusOK, o)
	return nil
}

// handleDelete is DELETE /v1/files/{sid}/{fid} and DELETE /v1/sessions/{sid}/objects/{fid}. A file
// already gone answers 404, so that a client sweeping its references retires it instead of retrying.
func (h *Hub) handleDelete(w http.ResponseWriter, r *http.Request, key *ClientKey, sid, fid string) *clientError {
	if err := h.cfg.Files.Delete(r.Context(), key.TenantID, sid, fid); err != nil {
		return h.storeError(err)
	}
	o := &bridge.Object{}
	o.Set("message", "File deleted successfully")
	o.Set("session_id", sid)
	o.Set("fileId", fid)
	writeValue(w, http.StatusOK, o)
	return nil
}

// serveHealth is GET /v1/health, upstream's liveness probe: "OK" while the store answers.
func (h *Hub) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeExecError(w, &clientError{status: http.StatusMethodNotAllowed, code: "method_not_allowed"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	status := http.StatusOK
	if err := h.checkEpoch(ctx); err != nil {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(http.StatusText(status)))
}
