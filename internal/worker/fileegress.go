package worker

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/execmanifest"
	"github.com/codellm/codellm/internal/filerelay"
)

// FileEgress lets a LibreChat Code API drive this worker with by-reference inputs ({id,
// storage_session_id}) and have generated files stored, both through the worker's file relay
// (internal/filerelay) under the execution's signed manifest (internal/execmanifest).
type FileEgress struct {
	RelayURL string            // the relay's base URL
	Token    string            // the relay token (X-LibreChat-Code-Relay-Token)
	Key      ed25519.PublicKey // the Code API's manifest verifier key
	Client   *http.Client      // nil: http.DefaultClient
	Timeout  time.Duration     // one relay exchange (0: filerelay.DefaultTimeout)
	MaxBytes int64             // one input's bytes (0: filerelay.DefaultMaxBytes)
}

// GrantMember is the execute body member carrying the egress grant (preferred over filerelay.GrantHeader).
const GrantMember = "egress_grant"

// WithFileEgress wraps a supervisor so that every call must carry a manifest that verifies under fe.Key
// and describes that very request, and is answered before the inner supervisor (or the relay) is used
// otherwise. Inputs are read through the relay here, in the worker, and handed to the runner as inline
// files; the runner's generated files are stored through the relay and answered as {name, size, id}.
// The sandbox itself never talks to the relay: under the docker supervisors its containers keep
// --network none.
func WithFileEgress(inner Supervisor, fe *FileEgress) Supervisor {
	return &egressSupervisor{Supervisor: inner, fe: fe}
}

type egressSupervisor struct {
	Supervisor
	fe *FileEgress
}

// egressRun is one execution's use of the relay, bounded by its manifest.
type egressRun struct {
	fe       *FileEgress
	claims   *execmanifest.Claims
	grant    string
	requests int
}

func refusal(status int, msg string) *RunError {
	return &RunError{Message: msg, Status: status, KnownClean: true}
}

func (s *egressSupervisor) Execute(ctx context.Context, call RunnerCall) (*bridge.Object, error) {
	body, err := bridge.ParseObject(call.Body)
	if err != nil {
		return nil, refusal(http.StatusBadRequest, "the execute body is not a JSON object")
	}
	claims, err := execmanifest.VerifyRequest(execmanifest.Token(body, headerValue(call.Headers, execmanifest.Header)), s.fe.Key, body, time.Now())
	if err != nil {
		me := err.(*execmanifest.Error)
		return nil, &RunError{Message: me.Message, Status: me.Status(), KnownClean: me.Status() < 500}
	}
	grant, _ := body.Get(GrantMember)
	g, _ := grant.(string)
	if g == "" {
		g = headerValue(call.Headers, filerelay.GrantHeader)
	}
	if g == "" {
		return nil, refusal(http.StatusForbidden, "An egress grant ("+GrantMember+" or "+filerelay.GrantHeader+") is required to reach the file relay")
	}
	ex := &egressRun{fe: s.fe, claims: claims, grant: g}
	if err := ex.fetchInputs(ctx, body); err != nil {
		return nil, err
	}
	// The runner needs neither capability: the sandbox is not to hold what could reach the gateway.
	body.Delete(execmanifest.BodyMember)
	body.Delete(GrantMember)
	inner := call
	if inner.Body, err = bridge.Canonical(body); err != nil {
		return nil, refusal(http.StatusBadRequest, err.Error())
	}
	inner.Tree, inner.Headers = body, withoutHeaders(call.Headers, execmanifest.Header, filerelay.GrantHeader)
	reply, err := s.Supervisor.Execute(ctx, inner)
	if err != nil {
		return nil, err
	}
	ex.storeOutputs(ctx, reply, execmanifest.OutputSession(body))
	return reply, nil
}

func withoutHeaders(h [][2]string, names ...string) [][2]string {
	var out [][2]string
	for _, kv := range h {
		drop := false
		for _, n := range names {
			drop = drop || strings.EqualFold(kv[0], n)
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// fetchInputs replaces every by-reference file of body with its bytes read through the relay, under the
// name the manifest authorised (file<index>.code when unnamed). A gateway refusal (4xx other than 408 and
// 429) is the request's fault and nothing has run: a known-clean 400. Anything else is 502.
func (ex *egressRun) fetchInputs(ctx context.Context, body *bridge.Object) error {
	refs, me := execmanifest.RequestInputFiles(body) // the verified manifest authorised exactly these
	if me != nil {
		return refusal(http.StatusBadRequest, me.Message)
	}
	v, _ := body.Get("files")
	files, _ := v.([]any)
	limit := ex.fe.MaxBytes
	if limit <= 0 {
		limit = filerelay.DefaultMaxBytes
	}
	for _, ref := range refs {
		i, id, sid, name := ref.Index, ref.ID, ref.SessionID, ref.Name
		data, status, err := ex.exchange(ctx, http.MethodGet, sid, id, nil, nil, limit)
		at := fmt.Sprintf("files[%d]: object %q of session %q", i, id, sid)
		switch {
		case err != nil:
			return &RunError{Message: at + ": reading it through the file relay failed: " + err.Error(), Status: http.StatusBadGateway, KnownClean: true}
		case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
			return refusal(http.StatusBadRequest, fmt.Sprintf("%s: the file relay answered HTTP %d", at, status))
		case status != http.StatusOK:
			return &RunError{Message: fmt.Sprintf("%s: the file relay answered HTTP %d", at, status), Status: http.StatusBadGateway, KnownClean: true}
		}
		files[i] = &bridge.Object{Members: []bridge.Member{{Key: "name", Value: name},
			{Key: "content", Value: base64.StdEncoding.EncodeToString(data)}, {Key: "encoding", Value: "base64"}}}
	}
	return nil
}

func stringMember(o *bridge.Object, k string) (string, bool) {
	v, ok := o.Get(k)
	s, isStr := v.(string)
	return s, ok && isStr
}

// storeOutputs uploads the run's generated files (those the runner returned with content) to the output
// session within the manifest's max_output_files, max_upload_bytes and max_requests, and answers each
// stored one as {name, size, id}. A file not stored — over a bound, too large for the runner to list its
// content, or refused by the gateway — is left out and files_truncated set, as the Code API prunes a
// failed upload: a reference that does not resolve must never reach the caller.
func (ex *egressRun) storeOutputs(ctx context.Context, reply *bridge.Object, outSession string) {
	v, ok := reply.Get("files")
	if !ok {
		return
	}
	files, _ := v.([]any)
	kept := []any{}
	for _, e := range files {
		fo, _ := e.(*bridge.Object)
		if len(kept) < ex.claims.MaxOutputFiles {
			if f, ok := ex.storeOne(ctx, fo, outSession); ok {
				kept = append(kept, f)
				continue
			}
		}
		reply.Set("files_truncated", true)
	}
	reply.Set("files", kept)
}

func (ex *egressRun) storeOne(ctx context.Context, f *bridge.Object, outSession string) (*bridge.Object, bool) {
	name, _ := stringMember(f, "name")
	content, hasContent := stringMember(f, "content")
	data, err := base64.StdEncoding.DecodeString(content)
	if name == "" || !hasContent || err != nil || int64(len(data)) > ex.claims.MaxUploadBytes {
		return nil, false
	}
	id := newObjectID()
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	hdr := http.Header{"Content-Type": {ct}, "X-Original-Filename": {url.PathEscape(name)}}
	_, status, err := ex.exchange(ctx, http.MethodPut, outSession, id, data, hdr, 1<<20)
	if err != nil || status < 200 || status > 299 {
		return nil, false
	}
	return &bridge.Object{Members: []bridge.Member{{Key: "name", Value: name},
		{Key: "size", Value: float64(len(data))}, {Key: "id", Value: id}}}, true
}

var errTooLarge = errors.New("the object is larger than the file relay's byte bound")

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
		return nil, 0, errTooLarge
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
