package worker

// LibreChat's newest file surface end to end (issue 40 items 1, 6 and 7): skills primed read-only
// through /v1/upload/batch, their freshness check, a chat attachment by storage_session_id, and file
// deletion — the hub driven with upstream's shapes, a worker running codellm's runner in the sandbox.

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"
)

// postForm posts multipart fields then files (name → content) as LibreChat's client does.
func postForm(t *testing.T, h *testHub, path string, fields [][2]string, files [][2]string) reply {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		_ = mw.WriteField(f[0], f[1])
	}
	for _, f := range files {
		fw, _ := mw.CreateFormFile("file", f[0])
		_, _ = io.WriteString(fw, f[1])
	}
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, h.base+path, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("X-API-Key", apiKey)
	return doHTTP(t, req)
}

func callHub(t *testing.T, h *testHub, method, path string) reply {
	t.Helper()
	req, _ := http.NewRequest(method, h.base+path, nil)
	req.Header.Set("X-API-Key", apiKey)
	return doHTTP(t, req)
}

const skillCode = `import sys
sys.path.insert(0, "/mnt/data/skill")
import helper
print(helper.greet())
open("/mnt/data/skill/SKILL.md", "a").write("tampered")
open("/mnt/data/out.txt", "w").write("result")
`

// TestLibreChatSkillsAndDelete: a skill's files uploaded read-only in one batch run from /mnt/data;
// the run changes one of them and writes out.txt, and only out.txt comes back; the stored skill file is
// unchanged and its metadata says readOnly. A chat attachment referenced by storage_session_id runs,
// and once deleted it is refused (400 file_not_found) and gone from the session.
func TestLibreChatSkillsAndDelete(t *testing.T) {
	h, _ := libreChatWorker(t, "lc-skills", newEmbedded(t, false))

	b := postForm(t, h, "/upload/batch", [][2]string{{"kind", "skill"}, {"id", "skill_1"}, {"version", "2"}, {"read_only", "true"}},
		[][2]string{{"skill/SKILL.md", "# greet\n"}, {"skill/helper.py", "def greet():\n    return 'hello from skill'\n"}})
	var batch struct {
		Message string
		Session string `json:"storage_session_id"`
		Files   []struct{ Status, Filename, FileID string }
	}
	if b.status != 200 || json.Unmarshal(b.body, &batch) != nil || batch.Message != "success" || len(batch.Files) != 2 {
		t.Fatalf("batch: %d %s", b.status, b.body)
	}
	var refs []map[string]any
	for _, f := range batch.Files {
		refs = append(refs, map[string]any{"id": f.FileID, "name": f.Filename, "storage_session_id": batch.Session, "kind": "skill", "version": 2})
	}
	res := execLikeLibreChat(t, h, map[string]any{"lang": "py", "code": skillCode, "files": refs})
	if res.Stdout != "hello from skill\n" || len(res.Files) != 1 || res.Files[0].Name != "out.txt" {
		t.Fatalf("skill run: %+v (want only out.txt back)", res)
	}
	if got := download(t, h, batch.Session, batch.Files[0].FileID); string(got) != "# greet\n" {
		t.Fatalf("stored SKILL.md = %q", got)
	}
	m := callHub(t, h, http.MethodGet, "/sessions/"+batch.Session+"/objects/"+batch.Files[0].FileID)
	var meta struct {
		LastModified string
		ReadOnly     bool
		Size         int
	}
	if m.status != 200 || json.Unmarshal(m.body, &meta) != nil || !meta.ReadOnly || meta.Size != 8 {
		t.Fatalf("object metadata: %d %s", m.status, m.body)
	}
	if ts, err := time.Parse(time.RFC3339, meta.LastModified); err != nil || time.Since(ts) > time.Minute {
		t.Fatalf("lastModified %q: %v", meta.LastModified, err)
	}

	up := postForm(t, h, "/upload", nil, [][2]string{{"notes.txt", "attached"}})
	var u struct {
		Session string `json:"storage_session_id"`
		Files   []struct{ FileID string }
	}
	if up.status != 200 || json.Unmarshal(up.body, &u) != nil || len(u.Files) != 1 || u.Session == "" {
		t.Fatalf("upload: %d %s", up.status, up.body)
	}
	ref := map[string]any{"id": u.Files[0].FileID, "name": "notes.txt", "storage_session_id": u.Session}
	body := map[string]any{"lang": "py", "code": "print(open('/mnt/data/notes.txt').read())", "files": []any{ref}}
	if res := execLikeLibreChat(t, h, body); res.Stdout != "attached\n" {
		t.Fatalf("attachment by storage_session_id: %+v", res)
	}
	if d := callHub(t, h, http.MethodDelete, "/files/"+u.Session+"/"+u.Files[0].FileID); d.status != 200 {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	bb, _ := json.Marshal(body)
	if e := h.client(t, t.Context(), "/v1/exec", string(bb), nil); e.status != 400 || !strings.Contains(string(e.body), "file_not_found") {
		t.Fatalf("exec with a deleted file: %d %s", e.status, e.body)
	}
	if l := callHub(t, h, http.MethodGet, "/files/"+u.Session); l.status != 200 || string(l.body) != "[]" {
		t.Fatalf("listing after delete: %d %s", l.status, l.body)
	}
}
