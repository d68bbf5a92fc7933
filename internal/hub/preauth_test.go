package hub

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// countingBody is a request body of n zero bytes that counts what the handler read.
type countingBody struct {
	left int64
	read atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	clear(p)
	b.left -= int64(len(p))
	b.read.Add(int64(len(p)))
	return len(p), nil
}

func (b *countingBody) Close() error { return nil }

// TestSettleAuthenticatesBeforeReadingTheBody (red-team item 4): the hub read up to 32 MiB of a settle
// body before authenticating, so 24 anonymous connections took its RSS from 119 to 1017 MiB. An
// anonymous, forged or stale settle is now refused without reading a byte of its body; a genuine
// worker's settle still reads the body (and gets past authentication).
func TestSettleAuthenticatesBeforeReadingTheBody(t *testing.T) {
	h := newTestHub(t, nil)
	w := newWorker(t, h, "urn:codellm:worker:preauth")
	w.pair(h)
	path := "/v1" + bridge.PathSettle(w.id, "asg-1")
	forged := bridge.Proof{Credential: "forged-credential", Timestamp: bridge.FormatTime(time.Now()), Nonce: bridge.NewID(), Signature: "x"}
	stale := bridge.Proof{Credential: w.credential, Timestamp: bridge.FormatTime(time.Now().Add(-time.Hour)), Nonce: bridge.NewID(), Signature: "x"}
	genuine := bridge.Proof{Credential: w.credential, Timestamp: bridge.FormatTime(time.Now()), Nonce: bridge.NewID(), Signature: "x"}
	for _, c := range []struct {
		name     string
		proof    *bridge.Proof
		wantRead bool
	}{
		{"anonymous", nil, false},
		{"forged credential", &forged, false},
		{"stale timestamp", &stale, false},
		{"live credential (signature checked after the body)", &genuine, true},
	} {
		body := &countingBody{left: h.cfg.MaxSettleBody}
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.Body, req.ContentLength = body, h.cfg.MaxSettleBody
		req.Header.Set("Content-Type", "application/json")
		if c.proof != nil {
			c.proof.Apply(req.Header)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		read := body.read.Load()
		if c.wantRead {
			if read == 0 || rec.Code == 200 {
				t.Errorf("%s: read %d bytes, status %d; want the body read and the (bad) signature refused", c.name, read, rec.Code)
			}
			continue
		}
		if read != 0 || rec.Code != http.StatusUnauthorized {
			t.Errorf("%s: read %d bytes of the body before answering %d %s; want 401 with nothing read", c.name, read, rec.Code, rec.Body)
		}
	}
}

// TestAdminRoutesAuthenticateBeforeReadingTheBody: the admin token is checked before the body too.
func TestAdminRoutesAuthenticateBeforeReadingTheBody(t *testing.T) {
	h := newTestHub(t, nil)
	body := &countingBody{left: h.cfg.MaxBody}
	req := httptest.NewRequest(http.MethodPost, "/v1/bridge/pairings", nil)
	req.Body, req.ContentLength = body, h.cfg.MaxBody
	req.Header.Set("Authorization", "Bearer wrong")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || body.read.Load() != 0 {
		t.Fatalf("wrong admin token: %d after reading %d bytes", rec.Code, body.read.Load())
	}
}
