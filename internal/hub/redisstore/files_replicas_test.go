package redisstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"testing"

	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/filestore"
)

// Two hub replicas on one Redis share LibreChat's files: a file uploaded through replica A is listed
// and downloaded byte for byte through replica B, and B knows the session's owner.
func TestFilesAcrossReplicas(t *testing.T) {
	url := needRedis(t)
	prefix := "files-replicas:" + t.Name() + ":"
	withFiles := func(c *hub.Config) {
		fs, err := filestore.OpenRedis(context.Background(), url, c.FileLimits)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fs.Close() })
		c.Files = fs
	}
	a := newReplica(t, prefix, true, withFiles)
	b := newReplica(t, prefix, true, withFiles)

	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "data.bin")
	payload := []byte("a,b\n\x00\xff binary\n")
	_, _ = fw.Write(payload)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, a.base+"/upload", &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("X-API-Key", apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var up struct {
		SessionID string                              `json:"session_id"`
		Files     []struct{ FileID, Filename string } `json:"files"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&up)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(up.Files) != 1 {
		t.Fatalf("upload on A: %d %+v", resp.StatusCode, up)
	}
	get := func(path string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
		req.Header.Set("X-API-Key", apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	if st, body := get("/download/" + up.SessionID + "/" + up.Files[0].FileID); st != 200 || !bytes.Equal(body, payload) {
		t.Fatalf("download on B: %d %q", st, body)
	}
	if st, body := get("/files/" + up.SessionID + "?detail=summary"); st != 200 || !bytes.Contains(body, []byte(up.SessionID+"/"+up.Files[0].FileID)) {
		t.Fatalf("listing on B: %d %s", st, body)
	}
}
