package hub

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/hub/filestore"
)

var librechatID = regexp.MustCompile(`^[A-Za-z0-9_-]{21}$`)

type uploadPart struct{ field, filename, content string }

// upload posts a multipart body as LibreChat's crud.js does: form-data parts, and its header override
// of Content-Type to a bare multipart/form-data when bare is set.
func (h *testHub) upload(t *testing.T, key string, bare bool, parts ...uploadPart) reply {
	t.Helper()
	return h.uploadTo(t, "/upload", key, bare, parts...)
}

// uploadTo is upload to another path (/upload/batch).
func (h *testHub) uploadTo(t *testing.T, path, key string, bare bool, parts ...uploadPart) reply {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		if p.filename == "" {
			_ = mw.WriteField(p.field, p.content)
			continue
		}
		fw, _ := mw.CreateFormFile(p.field, p.filename)
		_, _ = io.WriteString(fw, p.content)
	}
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, h.base+path, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	if bare {
		req.Header.Set("Content-Type", "multipart/form-data")
	}
	req.Header.Set("User-Agent", "LibreChat/1.0")
	req.Header.Set("User-Id", "user-1")
	if strings.HasPrefix(key, "Bearer ") { // a signed token
		req.Header.Set("Authorization", key)
	} else if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	return doHTTP(t, req)
}

func (h *testHub) get(t *testing.T, key, path string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+path, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	return doHTTP(t, req)
}

type uploadReply struct {
	Message          string `json:"message"`
	SessionID        string `json:"session_id"`
	StorageSessionID string `json:"storage_session_id"` // what LibreChat ≥ 0.8.6 reads (issue 40 item 1)
	Files            []struct {
		FileID   string `json:"fileId"`
		Filename string `json:"filename"`
	} `json:"files"`
}

func mustUpload(t *testing.T, h *testHub, name, content string) uploadReply {
	t.Helper()
	r := h.upload(t, apiKey, true, uploadPart{"entity_id", "", "asst_1"}, uploadPart{"file", name, content})
	var u uploadReply
	if r.status != 200 || json.Unmarshal(r.body, &u) != nil || u.Message != "success" || len(u.Files) != 1 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if u.StorageSessionID != u.SessionID {
		t.Fatalf("upload: storage_session_id %q, session_id %q: %s", u.StorageSessionID, u.SessionID, r.body)
	}
	if !librechatID.MatchString(u.SessionID) || !librechatID.MatchString(u.Files[0].FileID) || u.Files[0].Filename != name {
		t.Fatalf("upload ids fail LibreChat's isValidID: %s", r.body)
	}
	return u
}

func TestUploadListDownload(t *testing.T) {
	h := newTestHub(t, nil)
	csv := "a,b\n1,2\n3,4\n"
	u := mustUpload(t, h, "data.csv", csv)
	sid, fid := u.SessionID, u.Files[0].FileID

	r := h.get(t, apiKey, "/files/"+sid+"?detail=summary&entity_id=asst_1")
	var summary []map[string]any
	if r.status != 200 || json.Unmarshal(r.body, &summary) != nil || len(summary) != 1 {
		t.Fatalf("summary: %d %s", r.status, r.body)
	}
	// process.js: response.data.find((file) => file.name.startsWith(path))?.lastModified, path = sid/fid.
	name, _ := summary[0]["name"].(string)
	lm, _ := summary[0]["lastModified"].(string)
	if !strings.HasPrefix(name, sid+"/"+fid) {
		t.Fatalf("summary name %q does not start with %s/%s", name, sid, fid)
	}
	if ts, err := time.Parse(time.RFC3339Nano, lm); err != nil || time.Since(ts) > time.Minute {
		t.Fatalf("lastModified %q: %v", lm, err)
	}
	r = h.get(t, apiKey, "/files/"+sid)
	var full []map[string]any
	if r.status != 200 || json.Unmarshal(r.body, &full) != nil || len(full) != 1 || full[0]["filename"] != "data.csv" ||
		full[0]["id"] != fid || full[0]["size"] != float64(len(csv)) {
		t.Fatalf("full listing: %d %s", r.status, r.body)
	}
	r = h.get(t, apiKey, "/download/"+sid+"/"+fid)
	if r.status != 200 || string(r.body) != csv || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") {
		t.Fatalf("download: %d %q %v", r.status, r.body, r.header)
	}
	// A boundary in the header works as well as the sniffed one.
	if r := h.upload(t, apiKey, false, uploadPart{"file", "b.txt", "x"}); r.status != 200 {
		t.Fatalf("upload with boundary: %d %s", r.status, r.body)
	}
}

// TestFileIsolation: another tenant's ids are unknown ids everywhere; nothing is written through them.
func TestFileIsolation(t *testing.T) {
	const otherKey = "other-tenant-key"
	h := newTestHub(t, func(c *Config) { c.ClientKeys = append(c.ClientKeys, ClientKey{Key: otherKey, TenantID: "other"}) })
	u := mustUpload(t, h, "secret.csv", "s3cret")
	sid, fid := u.SessionID, u.Files[0].FileID
	if r := h.get(t, otherKey, "/download/"+sid+"/"+fid); r.status != 404 || bytes.Contains(r.body, []byte("s3cret")) {
		t.Fatalf("foreign download: %d %s", r.status, r.body)
	}
	if r := h.get(t, apiKey, "/download/"+sid+"/"+fid); r.status != 200 {
		t.Fatalf("own download: %d", r.status)
	}
	if r := h.get(t, otherKey, "/files/"+sid); r.status != 200 || string(r.body) != "[]" {
		t.Fatalf("foreign listing: %d %s", r.status, r.body)
	}
	r := h.upload(t, otherKey, false, uploadPart{"session_id", "", sid}, uploadPart{"file", "planted.py", "x"})
	if r.status != 404 {
		t.Fatalf("upload into a foreign session: %d %s", r.status, r.body)
	}
	body := `{"lang":"py","code":"print(1)","files":[{"id":"` + fid + `","name":"secret.csv","session_id":"` + sid + `"}]}`
	if r := h.client(t, "/v1/exec", body, map[string]string{"X-API-Key": otherKey}); r.status != 400 || errField(r) != "file_not_found" {
		t.Fatalf("exec with a foreign file: %d %s", r.status, r.body)
	}
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"1","session_id":"`+sid+`"}`, map[string]string{"X-API-Key": otherKey}); r.status != 404 {
		t.Fatalf("exec in a foreign session: %d %s", r.status, r.body)
	}
	if r := h.get(t, apiKey, "/files/"+sid); !bytes.Contains(r.body, []byte(`"filename":"secret.csv"`)) || bytes.Contains(r.body, []byte("planted")) {
		t.Fatalf("listing after the attempts: %s", r.body)
	}
	for _, p := range []string{"/files/" + sid, "/download/" + sid + "/" + fid} {
		if r := h.get(t, "", p); r.status != 401 {
			t.Fatalf("%s without a key: %d", p, r.status)
		}
	}
}

// TestUploadRefusals: each bad upload gets its own 4xx and stores nothing.
func TestUploadRefusals(t *testing.T) {
	h := newTestHub(t, func(c *Config) {
		c.FileLimits.MaxFileBytes, c.FileLimits.MaxSessionBytes, c.FileLimits.MaxSessionFiles = 8, 12, 2
	})
	cases := []struct {
		parts  []uploadPart
		status int
		code   string
	}{
		{[]uploadPart{{"file", "big.bin", "123456789"}}, 413, "file_too_large"},
		{[]uploadPart{{"file", "a", "1234"}, {"file", "b", "1234"}, {"file", "c", "1"}}, 413, "too_many_files"},
		{[]uploadPart{{"file", "a", "12345678"}, {"file", "b", "12345"}}, 413, "session_quota_exceeded"},
		{[]uploadPart{{"file", "..", "x"}}, 400, "invalid_file_name"},
		{[]uploadPart{{"file", ".", "x"}}, 400, "invalid_file_name"},
		{[]uploadPart{{"entity_id", "", "e"}}, 400, "invalid_request"},
		{[]uploadPart{{"session_id", "", "not-an-id"}, {"file", "a", "x"}}, 400, "invalid_request"},
	}
	for i, c := range cases {
		r := h.upload(t, apiKey, i%2 == 0, c.parts...)
		if r.status != c.status || errField(r) != c.code {
			t.Fatalf("case %d: %d %s, want %d %s", i, r.status, r.body, c.status, c.code)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, h.base+"/upload", strings.NewReader(`{"file":"x"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	if r := doHTTP(t, req); r.status != 415 {
		t.Fatalf("JSON upload: %d %s", r.status, r.body)
	}
	if r := h.upload(t, "wrong", false, uploadPart{"file", "a", "x"}); r.status != 401 {
		t.Fatalf("bad key: %d", r.status)
	}
	if r := h.get(t, apiKey, "/download/"+newSessionID()+"/"+newSessionID()); r.status != 404 || errField(r) != "file_not_found" {
		t.Fatalf("unknown download: %d %s", r.status, r.body)
	}
	// Nothing of the refused batches was stored: the whole per-file allowance is still there.
	if r := h.upload(t, apiKey, true, uploadPart{"file", "a", "12345678"}, uploadPart{"file", "b", "1234"}); r.status != 200 {
		t.Fatalf("a batch that fits: %d %s", r.status, r.body)
	}
}

// TestExecFileReferences drives /v1/exec as LibreChat does with files, against a worker that checks the
// runner body it receives and reports generated files, byproducts included.
func TestExecFileReferences(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "vm-files")
	w.pair(h)
	csv := "x,y\n1,2\n"
	png := []byte("\x89PNG\r\n\x1a\n\x00binary\xff")
	var calls atomic.Int32
	var gotTimeout atomic.Int64
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		calls.Add(1)
		body, _ := a.Request.Object().Get("body")
		o := body.(*bridge.Object)
		rt, _ := o.Get("run_timeout")
		ms, _ := rt.(float64)
		gotTimeout.Store(int64(ms))
		files, _ := o.Get("files")
		list := files.([]any)
		var inputs []string
		for _, f := range list[1:] {
			fo := f.(*bridge.Object)
			n, _ := fo.Get("name")
			c, _ := fo.Get("content")
			raw, _ := base64.StdEncoding.DecodeString(c.(string))
			inputs = append(inputs, n.(string)+"="+string(raw))
		}
		out := &bridge.Object{}
		run := &bridge.Object{}
		run.Set("stdout", strings.Join(inputs, ";"))
		run.Set("stderr", "")
		run.Set("code", 0.0)
		run.Set("signal", nil)
		out.Set("run", run)
		gen := []any{}
		for _, g := range [][2]string{{"plot.png", string(png)}, {"out/summary.csv", csv}, {"__pycache__/m.cpython-311.pyc", "x"}, {".cache/fontlist.json", "{}"}, {"m.pyc", "x"}} {
			f := &bridge.Object{}
			f.Set("name", g[0])
			f.Set("size", float64(len(g[1])))
			f.Set("encoding", "base64")
			f.Set("content", base64.StdEncoding.EncodeToString([]byte(g[1])))
			gen = append(gen, f)
		}
		out.Set("files", gen)
		return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: w.incarnation, Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)}
	})
	defer stop()

	u := mustUpload(t, h, "data.csv", csv)
	// ./ prefixes and a duplicate name (LibreChat re-uploads) are accepted; the later file wins.
	other := mustUpload(t, h, "data.csv", "newer")
	refs := `[{"id":"` + u.Files[0].FileID + `","name":"./data.csv","session_id":"` + u.SessionID + `"},` +
		`{"id":"` + other.Files[0].FileID + `","name":"data.csv","session_id":"` + other.SessionID + `"}]`
	r := h.client(t, "/v1/exec", `{"lang":"py","code":"print(1)","files":`+refs+`}`, nil)
	var res struct {
		SessionID string                                       `json:"session_id"`
		Stdout    string                                       `json:"stdout"`
		Files     []struct{ ID, Name, Path, SessionID string } `json:"files"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
	if res.Stdout != "data.csv=newer" {
		t.Fatalf("the runner got inputs %q", res.Stdout)
	}
	if ms := gotTimeout.Load(); ms <= 0 || ms >= (300*time.Second).Milliseconds() {
		t.Fatalf("run_timeout %d ms is not below the 300 s exec deadline", ms)
	}
	if len(res.Files) != 2 || res.Files[0].Name != "out/summary.csv" && res.Files[1].Name != "out/summary.csv" {
		t.Fatalf("generated files: %s", r.body)
	}
	for _, f := range res.Files {
		if !librechatID.MatchString(f.ID) || f.Path != "/mnt/data/"+f.Name {
			t.Fatalf("file ref %+v", f)
		}
		want := csv
		if f.Name == "plot.png" {
			want = string(png)
		}
		d := h.get(t, apiKey, "/download/"+res.SessionID+"/"+f.ID)
		if d.status != 200 || string(d.body) != want {
			t.Fatalf("download %s: %d %q", f.Name, d.status, d.body)
		}
	}
	// Unknown ids are refused before any worker sees the request.
	n := calls.Load()
	bad := `{"lang":"py","code":"1","files":[{"id":"` + newSessionID() + `","name":"x","session_id":"` + u.SessionID + `"}]}`
	if r := h.client(t, "/v1/exec", bad, nil); r.status != 400 || errField(r) != "file_not_found" || calls.Load() != n {
		t.Fatalf("unknown file id: %d %s", r.status, r.body)
	}
	// The exec session is known to the file store: a second exec in it is accepted, and it lists the outputs.
	if r := h.client(t, "/v1/exec", `{"lang":"py","code":"1","session_id":"`+res.SessionID+`"}`, nil); r.status != 200 {
		t.Fatalf("second exec: %d %s", r.status, r.body)
	}
	if r := h.get(t, apiKey, "/files/"+res.SessionID+"?detail=summary"); r.status != 200 || strings.Count(string(r.body), `"name"`) != 4 {
		t.Fatalf("session listing: %s", r.body)
	}
}

func TestRunTimeoutBudget(t *testing.T) {
	for _, c := range []struct{ remaining, want time.Duration }{
		{60 * time.Second, 55 * time.Second},
		{10 * time.Second, 9 * time.Second},
		{3 * time.Second, 2 * time.Second},
		{500 * time.Millisecond, 100 * time.Millisecond},
	} {
		if got := runTimeout(c.remaining); got != c.want {
			t.Errorf("runTimeout(%v) = %v, want %v", c.remaining, got, c.want)
		}
	}
}

func errField(r reply) string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error
}

// TestOpenFilesBesideStore: `codellm hub` keeps the file index in its own store and the bytes in files/
// beside the store's file (not in the working directory).
func TestOpenFilesBesideStore(t *testing.T) {
	dir := t.TempDir()
	bs, err := boltstore.Open(filepath.Join(dir, "bridge.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	fs, err := openFiles(t.Context(), bs, "", filepath.Join(dir, "bridge.db"), filestore.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	sid := filestore.NewID()
	stored, err := fs.Put(t.Context(), "default", sid, []filestore.Upload{{Name: "a.txt", Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "files", sid, stored[0].ID)); err != nil || string(b) != "x" {
		t.Fatalf("blob beside the store: %q %v", b, err)
	}
	recs, err := bs.Backend().Read(t.Context(), "files:{s:"+sid+"}")
	if err != nil || recs[0] == nil {
		t.Fatalf("index record in the hub store: %v %v", recs, err)
	}
}
