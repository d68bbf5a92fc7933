package worker

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/hub"
)

// lcSigningKey stands for LibreChat's CODEAPI_JWT_PRIVATE_KEY.
var lcSigningKey = ed25519.NewKeyFromSeed([]byte("librechat-codeapi-jwt-signing-k1"))

// mintLikeLibreChat writes a token as packages/api/src/auth/codeapi.ts's mintCodeApiToken does: header
// {alg, typ, kid}, its claims in its order (code_worker_id when the user's environment names a worker).
func mintLikeLibreChat(sub, tenant, worker string) string {
	now := time.Now().Unix()
	b64 := base64.RawURLEncoding
	claims := `{"iss":"librechat","aud":"codeapi","sub":"` + sub + `","iat":` + strconv.FormatInt(now, 10) +
		`,"nbf":` + strconv.FormatInt(now, 10) + `,"exp":` + strconv.FormatInt(now+300, 10) +
		`,"jti":"` + strconv.FormatInt(time.Now().UnixNano(), 36) + `","tenant_id":"` + tenant + `","role":"USER","principal_source":"librechat_jwt"`
	if worker != "" {
		claims += `,"code_worker_id":"` + worker + `"`
	}
	claims += `,"auth_context_hash":"0000000000000000000000000000000000000000000000000000000000000000"}`
	input := b64.EncodeToString([]byte(`{"alg":"EdDSA","typ":"JWT","kid":"lc-codeapi-2026-05"}`)) + "." + b64.EncodeToString([]byte(claims))
	return input + "." + b64.EncodeToString(ed25519.Sign(lcSigningKey, []byte(input)))
}

// signedRequest sends a request as LibreChat does with CODEAPI_JWT_ENABLED: a bearer token, no API key,
// and X-LibreChat-Code-Worker-ID when the conversation's environment is attached to a worker.
func signedRequest(t *testing.T, h *testHub, method, path, ctype string, body io.Reader, token, worker string) reply {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), method, h.base+path, body)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("User-Agent", "LibreChat/1.0")
	req.Header.Set("Authorization", "Bearer "+token)
	if worker != "" {
		req.Header.Set(hub.HeaderLibreChatWorker, worker)
	}
	return doHTTP(t, req)
}

// TestLibreChatSignedTokenPinnedWorker drives the real worker as a LibreChat with per-user signed tokens
// and a stateful environment attached to the user's own worker: a file uploaded with the token is run on
// that worker (the token's code_worker_id, repeated in X-LibreChat-Code-Worker-ID), its output downloads
// with the token and stays invisible to another tenant's key; a header naming another worker is 403 and a
// claim naming a worker that is not online is 503, neither of them run anywhere.
func TestLibreChatSignedTokenPinnedWorker(t *testing.T) {
	h := newTestHub(t, func(c *hub.Config) {
		withFiles(t)(c)
		c.ClientJWT = &hub.ClientJWT{Keys: map[string]crypto.PublicKey{hub.DefaultClientJWTKID: lcSigningKey.Public()}}
	})
	id, path := h.pair(t, "user-vm")
	start(t, baseConfig(h, id, path, newEmbedded(t, true)))
	h.waitReady(t, "user-vm")
	token := mintLikeLibreChat("6650c0ffee0000000000abcd", "acme", "user-vm")

	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "notes.txt")
	_, _ = fw.Write([]byte("signed and pinned\n"))
	_ = mw.Close()
	r := signedRequest(t, h, http.MethodPost, "/upload", "multipart/form-data; boundary="+mw.Boundary(), &buf, token, "")
	var up struct {
		SID   string                              `json:"storage_session_id"`
		Files []struct{ FileID, Filename string } `json:"files"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &up) != nil || len(up.Files) != 1 {
		t.Fatalf("upload with a signed token: %d %s", r.status, r.body)
	}
	body, _ := json.Marshal(map[string]any{"lang": "py", "code": "s = open('/mnt/data/notes.txt').read()\nopen('/mnt/data/upper.txt', 'w').write(s.upper())\nprint(s, end='')",
		"files": []execFile{{ID: up.Files[0].FileID, Name: "notes.txt", SessionID: up.SID}}})
	r = signedRequest(t, h, http.MethodPost, "/exec", "application/json", bytes.NewReader(body), token, "user-vm")
	var res execResult
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil || res.Stdout != "signed and pinned\n" || len(res.Files) != 1 {
		t.Fatalf("pinned exec: %d %s", r.status, r.body)
	}
	dl := signedRequest(t, h, http.MethodGet, "/download/"+res.SessionID+"/"+res.Files[0].ID, "", nil, token, "")
	if dl.status != 200 || string(dl.body) != "SIGNED AND PINNED\n" {
		t.Fatalf("download with the token: %d %q", dl.status, dl.body)
	}
	other, _ := http.NewRequest(http.MethodGet, h.base+"/download/"+res.SessionID+"/"+res.Files[0].ID, nil)
	other.Header.Set("X-API-Key", apiKey) // tenant "default"
	if r := doHTTP(t, other); r.status != 404 {
		t.Fatalf("another tenant's key downloads the file: %d", r.status)
	}
	for _, c := range []struct {
		name, token, header string
		status              int
	}{
		{"header names another worker than the token", token, "other-vm", 403},
		{"header without a code_worker_id claim", mintLikeLibreChat("6650c0ffee0000000000abcd", "acme", ""), "user-vm", 403},
		{"token pins a worker that is not online", mintLikeLibreChat("6650c0ffee0000000000abcd", "acme", "absent-vm"), "", 503},
	} {
		code, _ := json.Marshal(map[string]string{"lang": "py", "code": "print('ran')"})
		if r := signedRequest(t, h, http.MethodPost, "/exec", "application/json", bytes.NewReader(code), c.token, c.header); r.status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.status)
		}
	}
}
