package runner

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/execmanifest"
	"github.com/codellm/codellm/internal/filerelay"
)

// FileEgress lets execute requests from a LibreChat Code API deployment name by-reference inputs
// ({id, storage_session_id}) and have their generated files stored, both through the worker's file relay
// (internal/filerelay) under the execution's signed manifest (internal/execmanifest). With it set, every
// execute must carry a manifest that verifies under Key and describes that very request; without it,
// file references are refused as before.
type FileEgress struct {
	RelayURL string            // the relay's base URL
	Token    string            // the relay token (X-LibreChat-Code-Relay-Token)
	Key      ed25519.PublicKey // the Code API's manifest verifier key
	Client   *http.Client      // nil: http.DefaultClient
	Timeout  time.Duration     // one relay exchange (0: filerelay.DefaultTimeout)
}

// GrantMember is the execute body member carrying the egress grant (preferred over filerelay.GrantHeader).
const GrantMember = "egress_grant"

// egressRun is one execution's use of the relay, bounded by its manifest.
type egressRun struct {
	fe       *FileEgress
	claims   *execmanifest.Claims
	grant    string
	requests int
	maxIn    int64
}

// executeEgress is executeJSON for a runner with FileEgress: verify the manifest against the body, fetch
// the by-reference inputs through the relay as inline files, run, then store the generated files through
// the relay and answer them as references ({name, size, id}) instead of content.
func (r *Runner) executeEgress(ctx context.Context, sessionID string, body []byte, h http.Header) (int, []byte, *ExecuteResponse) {
	fail := func(e *Error) (int, []byte, *ExecuteResponse) {
		status, b := errorBody(e)
		return status, b, nil
	}
	var er ExecuteRequest
	if e := decodeRequest(body, &er); e != nil {
		return fail(e)
	}
	tree, err := bridge.ParseObject(body)
	if err != nil {
		return fail(badRequest("invalid JSON: " + err.Error()))
	}
	fe := r.cfg.FileEgress
	claims, err := execmanifest.VerifyRequest(execmanifest.Token(tree, h.Get(execmanifest.Header)), fe.Key, tree, time.Now())
	if err != nil {
		me := err.(*execmanifest.Error)
		status, b := marshal(me.Status(), map[string]string{"message": me.Message})
		return status, b, nil
	}
	grant, _ := tree.Get(GrantMember)
	g, _ := grant.(string)
	if g == "" {
		g = h.Get(filerelay.GrantHeader)
	}
	if g == "" {
		status, b := marshal(http.StatusForbidden, map[string]string{"message": "An egress grant (egress_grant or " +
			filerelay.GrantHeader + ") is required to reach the file relay"})
		return status, b, nil
	}
	ex := &egressRun{fe: fe, claims: claims, grant: g, maxIn: r.cfg.MaxBodyBytes}
	if e := ex.fetchInputs(ctx, &er); e != nil {
		return fail(e)
	}
	resp, e := r.execute(ctx, sessionID, &er)
	if e != nil {
		return fail(e)
	}
	ex.storeOutputs(ctx, resp, execmanifest.OutputSession(tree))
	status, b := marshal(http.StatusOK, resp)
	return status, b, resp
}

// fetchInputs replaces every by-reference file of er with its bytes read through the relay, under the
// name the manifest authorised (file<index>.code when unnamed). A gateway refusal (4xx other than 408 and
// 429) is the request's fault and nothing has run: 400. Anything else is 502.
func (ex *egressRun) fetchInputs(ctx context.Context, er *ExecuteRequest) *Error {
	var total int64
	for i, f := range er.Files {
		if f.ID == "" {
			continue
		}
		sid := f.StorageSessionID
		if sid == "" {
			sid = ex.claims.OutputSessionID
		}
		name := f.Name
		if name == "" {
			name = "file" + strconv.Itoa(i) + ".code"
		}
		data, status, err := ex.exchange(ctx, http.MethodGet, sid, f.ID, nil, nil, ex.maxIn-total)
		if err != nil {
			return relayFailed(fmt.Sprintf("files[%d]: reading object %q of session %q through the file relay failed: %v", i, f.ID, sid, err))
		}
		if status != http.StatusOK {
			msg := fmt.Sprintf("files[%d]: the file relay answered HTTP %d for object %q of session %q", i, status, f.ID, sid)
			if status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests {
				return badRequest(msg)
			}
			return relayFailed(msg)
		}
		total += int64(len(data))
		enc := base64.StdEncoding.EncodeToString(data)
		er.Files[i] = File{Name: name, Content: &enc, Encoding: "base64"}
	}
	return nil
}

func relayFailed(msg string) *Error {
	return &Error{Status: http.StatusBadGateway, Code: "file_relay_failed", Message: msg, Kind: ErrSandbox}
}

// storeOutputs uploads the run's generated files (those the runner returned with content) to the output
// session, within the manifest's max_output_files, max_upload_bytes and max_requests, and answers each
// stored one as {name, size, id}. A file that was not stored — over a bound, too large to have its content
// listed, or refused by the gateway — is left out and files_truncated set, as the Code API prunes a failed
// upload: a reference that does not resolve must never reach the caller.
func (ex *egressRun) storeOutputs(ctx context.Context, resp *ExecuteResponse, outSession string) {
	kept := resp.Files[:0]
	for _, f := range resp.Files {
		if len(kept) < ex.claims.MaxOutputFiles {
			if id, ok := ex.storeOne(ctx, f, outSession); ok {
				kept = append(kept, OutFile{Name: f.Name, Size: f.Size, ID: id})
				continue
			}
		}
		resp.FilesTruncated = true
	}
	resp.Files = kept
}

func (ex *egressRun) storeOne(ctx context.Context, f OutFile, outSession string) (string, bool) {
	if f.Content == nil || f.Size > ex.claims.MaxUploadBytes {
		return "", false
	}
	data, err := base64.StdEncoding.DecodeString(*f.Content)
	if err != nil {
		return "", false
	}
	id := newObjectID()
	ct := mime.TypeByExtension(path.Ext(f.Name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	hdr := http.Header{"Content-Type": {ct}, "X-Original-Filename": {url.PathEscape(f.Name)}}
	_, status, err := ex.exchange(ctx, http.MethodPut, outSession, id, data, hdr, 1<<20)
	return id, err == nil && status >= 200 && status < 300
}

// exchange is one relay request for an object, counted against the manifest's max_requests; it returns
// the response body (at most limit bytes) and status.
func (ex *egressRun) exchange(ctx context.Context, method, session, id string, body []byte, hdr http.Header, limit int64) ([]byte, int, error) {
	if ex.requests >= ex.claims.MaxRequests {
		return nil, 0, fmt.Errorf("the manifest allows %d relay requests", ex.claims.MaxRequests)
	}
	ex.requests++
	timeout := ex.fe.Timeout
	if timeout <= 0 {
		timeout = filerelay.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := strings.TrimSuffix(ex.fe.RelayURL, "/") + "/sessions/" + url.PathEscape(session) + "/objects/" + url.PathEscape(id)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, 0, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set(filerelay.TokenHeader, ex.fe.Token)
	req.Header.Set(filerelay.GrantHeader, ex.grant)
	c := ex.fe.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(b)) > limit {
		return nil, 0, fmt.Errorf("the object is larger than %d bytes", limit)
	}
	return b, resp.StatusCode, nil
}

// newObjectID mints a generated file's object ID: 21 URL-safe random characters, the Code API's file ID
// form.
func newObjectID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	b := make([]byte, 21)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[b[i]&63]
	}
	return string(b)
}
