package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// maxHubReply bounds a hub reply held in memory (an assignment carries a request of at most the hub's
// 32 MiB settle-sized limit).
const maxHubReply = 64 << 20

// do signs and posts one canonical body under the current credential. The read lock keeps a rotation
// from swapping the credential while a request signed with it is in flight (the hub kills the old
// credential at once, so that request would fail with CREDENTIAL_INVALID).
func (w *Worker) do(ctx context.Context, path string, body []byte, timeout time.Duration, out any) error {
	w.credMu.RLock()
	defer w.credMu.RUnlock()
	return w.send(ctx, path, body, timeout, out, w.credential)
}

// send posts body to base+path and decodes a 2xx reply into out. Failures are *TransportError (no reply),
// *bridge.Error (non-2xx) or ErrProtocol (malformed 2xx).
func (w *Worker) send(ctx context.Context, path string, body []byte, timeout time.Duration, out any, credential string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var req *http.Request
	var err error
	if w.cfg.StaticToken != "" {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, w.base+path, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Authorization", "Bearer "+w.cfg.StaticToken)
			req.Header.Set("Content-Type", "application/json")
		}
	} else {
		req, err = bridge.NewSignedRequest(ctx, w.base, path, body, credential, w.priv, time.Now())
	}
	if err != nil {
		return fmt.Errorf("%w: building request: %v", ErrConfig, err)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return &TransportError{Err: err}
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxHubReply+1))
	if err != nil {
		return &TransportError{Err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return bridge.DecodeError(resp.StatusCode, rb)
	}
	if len(rb) > maxHubReply {
		return fmt.Errorf("%w: reply larger than %d bytes", ErrProtocol, maxHubReply)
	}
	return decodeReply(rb, out)
}

// decodeReply decodes a 2xx reply and insists on protocolVersion 1 (§2).
func decodeReply(rb []byte, out any) error {
	var pv struct {
		ProtocolVersion *float64 `json:"protocolVersion"`
	}
	if err := json.Unmarshal(rb, &pv); err != nil || pv.ProtocolVersion == nil || *pv.ProtocolVersion != bridge.ProtocolVersion {
		return fmt.Errorf("%w: reply without protocolVersion 1: %.200q", ErrProtocol, rb)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rb, out); err != nil {
		return fmt.Errorf("%w: malformed reply: %v", ErrProtocol, err)
	}
	return nil
}

// statusOf returns the HTTP status of a hub error, or 0.
func statusOf(err error) int {
	var be *bridge.Error
	if errors.As(err, &be) {
		return be.Status
	}
	return 0
}

// Pair generates a key pair, redeems code at the hub and writes the identity file (§3.2, §5). It returns
// the saved identity.
func Pair(ctx context.Context, client *http.Client, baseURL, code, workerID, identityPath string) (*Identity, error) {
	if !bridge.ValidWorkerID(workerID) {
		return nil, fmt.Errorf("%w: invalid worker ID %q", ErrConfig, workerID)
	}
	base := strings.TrimRight(baseURL, "/")
	if err := checkHubURL(base); err != nil {
		return nil, err
	}
	if client == nil {
		client = &http.Client{}
	}
	pub, priv, err := bridge.GenerateKey()
	if err != nil {
		return nil, err
	}
	pubPEM, err := bridge.MarshalPublicKeyPEM(pub)
	if err != nil {
		return nil, err
	}
	privPEM, err := bridge.MarshalPrivateKeyPEM(priv)
	if err != nil {
		return nil, err
	}
	body, err := bridge.Marshal(bridge.RedeemRequest{ProtocolVersion: 1, WorkerID: workerID, Code: code, PublicKey: pubPEM})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+bridge.PathRedeem(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, &TransportError{Err: err}
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, bridge.DecodeError(resp.StatusCode, rb)
	}
	var cr bridge.CredentialResponse
	if err := decodeReply(rb, &cr); err != nil {
		return nil, err
	}
	id := &Identity{ProtocolVersion: 1, WorkerID: cr.WorkerID, Credential: cr.Credential, ExpiresAt: cr.ExpiresAt,
		CodeAPIURL: base, PublicKey: pubPEM, PrivateKey: privPEM}
	if cr.WorkerID != workerID {
		return nil, fmt.Errorf("%w: hub paired worker %q, not %q", ErrProtocol, cr.WorkerID, workerID)
	}
	if err := id.Validate(); err != nil {
		return nil, fmt.Errorf("%w: hub reply: %v", ErrProtocol, err)
	}
	if err := SaveIdentity(identityPath, id); err != nil {
		return nil, err
	}
	return id, nil
}

// checkHubURL enforces §12: https unless the host is loopback.
func checkHubURL(base string) error {
	canon, err := CanonicalURL(base)
	if err != nil {
		return err
	}
	if strings.HasPrefix(canon, "https://") {
		return nil
	}
	if strings.HasPrefix(canon, "http://") {
		host := strings.TrimPrefix(canon, "http://")
		if i := strings.IndexByte(host, '/'); i >= 0 {
			host = host[:i]
		}
		h := host
		if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
			h = host[:i]
		}
		if loopbackHost(strings.Trim(h, "[]")) {
			return nil
		}
	}
	return fmt.Errorf("%w: hub URL %q must be https:// unless the host is loopback", ErrConfig, base)
}
