package bridge

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/wire"
)

// NewSignedRequest builds a worker's POST to base+path with a canonical body
// and a fresh proof (§4.2). base is the hub base URL (e.g.
// "https://hub.example.com/v1", trailing '/' ignored); path comes from the
// Path* helpers, so the worker ID is already escaped like encodeURIComponent.
// The signed path is exactly what goes on the request line.
func NewSignedRequest(ctx context.Context, base, path string, canonicalBody []byte, credential string, priv ed25519.PrivateKey, now time.Time) (*http.Request, error) {
	full := strings.TrimRight(base, "/") + path
	u, err := url.Parse(full)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, full, bytes.NewReader(canonicalBody))
	if err != nil {
		return nil, err
	}
	// Keep the percent-encoding the worker chose (%3A) on the wire.
	req.URL.RawPath = u.EscapedPath()
	SignRequest(priv, credential, http.MethodPost, u.EscapedPath(), canonicalBody, now).Apply(req.Header)
	return req, nil
}

// TruncateError cuts a settlement error to MaxSettlementError UTF-16 units
// without splitting a surrogate pair (§6.3).
func TruncateError(s string) string { return wire.ClipUTF16(s, MaxSettlementError) }
