package hub

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// fileCall is one request of the file-route golden file and the hub's answer, with ids and times
// replaced by placeholders (ids are random; the rest of each body is pinned byte for byte).
type fileCall struct {
	Name   string `json:"name"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Form   string `json:"form,omitempty"`
	Status int    `json:"status"`
	Body   string `json:"body"`
}

var (
	goldenID   = regexp.MustCompile(`(^|[^A-Za-z0-9_-])([A-Za-z0-9_-]{21})($|[^A-Za-z0-9_-])`)
	goldenTime = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
)

// normalizer maps each id to <idN> by first appearance, so a golden body still shows which ids agree.
type normalizer map[string]string

func (n normalizer) apply(s string) string {
	s = goldenTime.ReplaceAllString(s, "<time>")
	for {
		m := goldenID.FindStringSubmatchIndex(s)
		if m == nil {
			return s
		}
		id := s[m[4]:m[5]]
		if _, ok := n[id]; !ok {
			n[id] = fmt.Sprintf("<id%d>", len(n)+1)
		}
		s = s[:m[4]] + n[id] + s[m[5]:]
	}
}

func (h *testHub) call(t *testing.T, method, path, key string) reply {
	t.Helper()
	req, _ := http.NewRequest(method, h.base+path, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	return doHTTP(t, req)
}

// TestFileRoutesGolden pins the Code API file routes LibreChat's newest client calls (issue 40 items 1,
// 6 and 7) to upstream's shapes (code-interpreter's service/src/service/router.ts and file-server.ts):
// storage_session_id on /v1/upload, /v1/upload/batch with kind/id/version/read_only and per-file
// results, the objects metadata that primeSkillFiles reads, both DELETE paths, and /v1/health.
// Regenerate with `go test ./internal/hub -run TestFileRoutesGolden -update`.
func TestFileRoutesGolden(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.FileLimits.MaxFileBytes = 64 })
	norm := normalizer{}
	var got []fileCall
	record := func(name, method, path, form string, r reply) {
		got = append(got, fileCall{Name: name, Method: method, Path: norm.apply(path), Form: form, Status: r.status, Body: norm.apply(string(r.body))})
	}
	up := h.upload(t, apiKey, true, uploadPart{"file", "data.csv", "a,b\n1,2\n"})
	record("upload", "POST", "/v1/upload", "file=data.csv", up)
	var u uploadReply
	_ = json.Unmarshal(up.body, &u)
	skill := []uploadPart{{"kind", "", "skill"}, {"id", "", "skill_pptx"}, {"version", "", "3"}, {"read_only", "", "true"},
		{"file", "pptx/SKILL.md", "# pptx\n"}, {"file", "pptx/scripts/build.py", "print('x')\n"},
		{"file", "../escape.md", "x"}, {"file", "pptx/big.bin", strings.Repeat("x", 65)}}
	br := h.uploadTo(t, "/upload/batch", apiKey, true, skill...)
	record("batch: skill, one bad name, one too large", "POST", "/v1/upload/batch",
		"kind=skill id=skill_pptx version=3 read_only=true file=pptx/SKILL.md file=pptx/scripts/build.py file=../escape.md file=pptx/big.bin(65 B)", br)
	var b struct {
		Session string `json:"storage_session_id"`
		Files   []struct{ FileID string }
	}
	_ = json.Unmarshal(br.body, &b)
	for _, c := range []struct{ name, form string }{
		{"batch: skill without version", "kind=skill id=s"},
		{"batch: unknown kind", "kind=team id=s"},
		{"batch: version for a user file", "kind=user version=1"},
	} {
		var parts []uploadPart
		for _, f := range strings.Fields(c.form) {
			k, v, _ := strings.Cut(f, "=")
			parts = append(parts, uploadPart{k, "", v})
		}
		record(c.name, "POST", "/v1/upload/batch", c.form+" file=a.md", h.uploadTo(t, "/upload/batch", apiKey, true, append(parts, uploadPart{"file", "a.md", "x"})...))
	}
	record("batch: every file refused", "POST", "/v1/upload/batch", "file=../x",
		h.uploadTo(t, "/upload/batch", apiKey, true, uploadPart{"file", "../x", "x"}))
	record("batch: no file", "POST", "/v1/upload/batch", "kind=user", h.uploadTo(t, "/upload/batch", apiKey, true, uploadPart{"kind", "", "user"}))
	obj := "/sessions/" + b.Session + "/objects/" + b.Files[0].FileID
	for _, c := range []struct{ name, method, path, key string }{
		{"object metadata (read-only skill file)", "GET", obj, apiKey},
		{"object metadata (chat upload)", "GET", "/sessions/" + u.SessionID + "/objects/" + u.Files[0].FileID, apiKey},
		{"object metadata of an unknown file", "GET", "/sessions/" + b.Session + "/objects/" + newSessionID(), apiKey},
		{"object metadata without a key", "GET", obj, ""},
		{"object: POST", "POST", obj, apiKey},
		{"delete by /v1/files", "DELETE", "/files/" + u.SessionID + "/" + u.Files[0].FileID, apiKey},
		{"delete again", "DELETE", "/files/" + u.SessionID + "/" + u.Files[0].FileID, apiKey},
		{"download after delete", "GET", "/download/" + u.SessionID + "/" + u.Files[0].FileID, apiKey},
		{"delete by /v1/sessions/…/objects", "DELETE", obj, apiKey},
		{"metadata after delete", "GET", obj, apiKey},
		{"list after delete", "GET", "/files/" + b.Session + "?detail=summary", apiKey},
		{"health", "GET", "/health", ""},
	} {
		record(c.name, c.method, "/v1"+c.path, "", h.call(t, c.method, c.path, c.key))
	}
	compareGoldenCalls(t, "testdata/files_golden.json", got) // <idN> stays readable
}

// TestBatchFilesLimit: past upstream's 200 files a batch stores the first 200 and says so.
func TestBatchFilesLimit(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.FileLimits.MaxSessionFiles = 300 })
	var parts []uploadPart
	for i := range maxBatchFiles + 3 {
		parts = append(parts, uploadPart{"file", fmt.Sprintf("skill/f%03d.txt", i), "x"})
	}
	r := h.uploadTo(t, "/upload/batch", apiKey, false, parts...)
	var b struct {
		Message           string
		Succeeded, Failed int
		FilesLimitReached bool
		MaxFiles          int
		Session           string `json:"storage_session_id"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &b) != nil || b.Message != "success" || b.Succeeded != maxBatchFiles ||
		b.Failed != 0 || !b.FilesLimitReached || b.MaxFiles != maxBatchFiles {
		t.Fatalf("batch of %d: %d %.300s", len(parts), r.status, r.body)
	}
	var list []any
	if l := h.get(t, apiKey, "/files/"+b.Session+"?detail=summary"); json.Unmarshal(l.body, &list) != nil || len(list) != maxBatchFiles {
		t.Fatalf("stored %d files", len(list))
	}
}

// TestReadOnlyInputsStayReadOnly: a skill's files primed read_only into a run come back neither
// changed nor as generated files when the run modifies them; a new file of the same run does. Without
// the read-only mark (a plain upload) the modified input comes back, as before.
func TestReadOnlyInputsStayReadOnly(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "vm-skill")
	w.pair(h)
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement {
		body, _ := a.Request.Object().Get("body")
		files, _ := body.(*bridge.Object).Get("files")
		gen := []any{}
		for _, f := range files.([]any)[1:] { // the run rewrites every input and adds out.txt
			n, _ := f.(*bridge.Object).Get("name")
			gen = append(gen, runnerFile(n.(string), "changed"))
		}
		gen = append(gen, runnerFile("out.txt", "new"))
		out := &bridge.Object{}
		run := &bridge.Object{}
		run.Set("stdout", "")
		run.Set("stderr", "")
		run.Set("code", 0.0)
		out.Set("run", run)
		out.Set("files", gen)
		return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: w.incarnation, Status: bridge.StatusFulfilled, Result: bridge.NewRaw(out)}
	})
	defer stop()
	for _, c := range []struct {
		readOnly string
		want     []string
	}{{"true", []string{"out.txt"}}, {"false", []string{"skill/SKILL.md", "out.txt"}}} {
		r := h.uploadTo(t, "/upload/batch", apiKey, true, uploadPart{"kind", "", "skill"}, uploadPart{"id", "", "sk1"},
			uploadPart{"version", "", "1"}, uploadPart{"read_only", "", c.readOnly}, uploadPart{"file", "skill/SKILL.md", "# skill"})
		var b struct {
			Session string `json:"storage_session_id"`
			Files   []struct{ FileID, Filename string }
		}
		if r.status != 200 || json.Unmarshal(r.body, &b) != nil || len(b.Files) != 1 {
			t.Fatalf("batch: %d %s", r.status, r.body)
		}
		// The exec file reference as LibreChat's newest client sends it (storage_session_id, kind, version).
		ref := `{"id":"` + b.Files[0].FileID + `","name":"skill/SKILL.md","storage_session_id":"` + b.Session + `","kind":"skill","version":1}`
		e := h.client(t, "/v1/exec", `{"lang":"py","code":"1","files":[`+ref+`]}`, nil)
		var res struct {
			SessionID string `json:"session_id"`
			Files     []struct{ ID, Name string }
		}
		if e.status != 200 || json.Unmarshal(e.body, &res) != nil {
			t.Fatalf("exec: %d %s", e.status, e.body)
		}
		var names []string
		for _, f := range res.Files {
			names = append(names, f.Name)
		}
		if strings.Join(names, ",") != strings.Join(c.want, ",") {
			t.Fatalf("read_only=%s: generated files %v, want %v", c.readOnly, names, c.want)
		}
		if d := h.get(t, apiKey, "/download/"+b.Session+"/"+b.Files[0].FileID); string(d.body) != "# skill" {
			t.Fatalf("the stored skill file changed: %q", d.body)
		}
	}
}

func runnerFile(name, content string) *bridge.Object {
	f := &bridge.Object{}
	f.Set("name", name)
	f.Set("size", float64(len(content)))
	f.Set("encoding", "base64")
	f.Set("content", base64.StdEncoding.EncodeToString([]byte(content)))
	return f
}

// TestUploadMemoryBound (issue 35 item 10): the upload bytes held in memory across requests are
// bounded by MaxUploadMemory. While one upload holds most of the budget mid-body, a second is refused
// 503 upload_busy with Retry-After (without the bound it was read whole, 200); once the first is done
// the memory is back and the second goes through.
func TestUploadMemoryBound(t *testing.T) {
	const budget = 1 << 20
	h := newTestHub(t, func(c *Config) { c.MaxUploadMemory = budget })
	pr, pw := io.Pipe()
	t.Cleanup(func() { _ = pw.CloseWithError(io.ErrUnexpectedEOF) }) // a failed test must not leave the request hanging
	mw := multipart.NewWriter(pw)
	req, _ := http.NewRequest(http.MethodPost, h.base+"/upload", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("X-API-Key", apiKey)
	first := make(chan reply, 1)
	go func() { first <- doHTTP(t, req) }()
	fw, _ := mw.CreateFormFile("file", "big.bin")
	_, _ = fw.Write(bytes.Repeat([]byte("a"), 800<<10))
	for h.uploads.held() < 800<<10 { // the hub has read (and holds) the first 800 KiB
		time.Sleep(time.Millisecond)
	}
	r := h.upload(t, apiKey, false, uploadPart{"file", "second.bin", strings.Repeat("b", 300<<10)})
	if r.status != 503 || errField(r) != "upload_busy" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("second upload while the budget is held: %d %s", r.status, r.body)
	}
	_ = mw.Close()
	_ = pw.Close()
	if r := <-first; r.status != 200 {
		t.Fatalf("first upload: %d %s", r.status, r.body)
	}
	if n := h.uploads.held(); n != 0 {
		t.Fatalf("%d bytes still held after both uploads answered", n)
	}
	if r := h.upload(t, apiKey, false, uploadPart{"file", "second.bin", strings.Repeat("b", 300<<10)}); r.status != 200 {
		t.Fatalf("second upload after the first: %d %s", r.status, r.body)
	}
}

// TestTenantFileQuota (issue 35 item 9): one tenant filling its quota gets 413 tenant_quota_exceeded,
// and another tenant can still upload (with only the store-wide cap it got 507 for 24 h).
func TestTenantFileQuota(t *testing.T) {
	const otherKey = "other-tenant-key"
	h := newTestHub(t, func(c *Config) {
		c.ClientKeys = append(c.ClientKeys, ClientKey{Key: otherKey, TenantID: "other"})
		c.FileLimits.MaxTenantBytes, c.FileLimits.MaxTotalBytes = 10, 15
	})
	if r := h.upload(t, apiKey, true, uploadPart{"file", "a", "12345678"}); r.status != 200 {
		t.Fatalf("first upload: %d %s", r.status, r.body)
	}
	if r := h.upload(t, apiKey, true, uploadPart{"file", "b", "12345"}); r.status != 413 || errField(r) != "tenant_quota_exceeded" {
		t.Fatalf("past the tenant's quota: %d %s", r.status, r.body)
	}
	if r := h.upload(t, otherKey, true, uploadPart{"file", "c", "1234567"}); r.status != 200 {
		t.Fatalf("another tenant: %d %s", r.status, r.body)
	}
}
