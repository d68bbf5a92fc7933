package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of the rule.
const (
	HeaderKey        = "Idempotency-Key"
	HeaderRetryCount = "X-Stainless-Retry-Count"
	HeaderReplayed   = "Idempotent-Replayed"
	MaxKeyBytes      = 255
)

// ErrorWriter writes a refusal in the route's own error shape (OpenAI envelope, Piston message).
type ErrorWriter func(w http.ResponseWriter, status int, code, message string)

// Guard applies the rule to handlers.
type Guard struct {
	Store Store
	TTL   time.Duration // how long a finished response is replayed (default 10 min)
	// Pending bounds a claim whose holder died (the hub's replicas); default TTL. PendingFor, when set,
	// bounds it per request instead (the hub: the request's own deadline plus a grace).
	Pending    time.Duration
	PendingFor func(r *http.Request) time.Duration
	// MaxBody is the largest body fingerprinted; larger bodies go to the handler unguarded (it answers 413).
	MaxBody int64
	// Credential names the caller: keys are scoped by it, so two API keys never share records.
	Credential func(r *http.Request) string
	// Detach returns the context a claimed run uses: not cancelled when the client goes away (its retry
	// attaches to the run instead of starting another), cancelled on shutdown. Nil keeps r.Context().
	Detach  func(r *http.Request) (context.Context, context.CancelFunc)
	OnEvent func(event string)
	// FingerprintHeaders are request headers that make two bodies different requests
	// (X-Runtime-Session-Id on the runner API).
	FingerprintHeaders []string
}

// Event counts an event through OnEvent (stores call it too, so that one sink sees them all).
func (g *Guard) Event(e string) {
	if g.OnEvent != nil {
		g.OnEvent(e)
	}
}

func (g *Guard) ttl() time.Duration {
	if g.TTL <= 0 {
		return 10 * time.Minute
	}
	return g.TTL
}

// Wrap returns h behind the rule; refusals are written by fail.
func (g *Guard) Wrap(h http.Handler, fail ErrorWriter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, explicit := r.Header.Get(HeaderKey), r.Header.Get(HeaderKey) != ""
		retry, hasRetry := retryCount(r)
		if !explicit && !hasRetry {
			h.ServeHTTP(w, r)
			return
		}
		if explicit && !validKey(key) {
			fail(w, http.StatusBadRequest, "invalid_idempotency_key",
				"the Idempotency-Key header must be 1 to 255 printable ASCII characters")
			return
		}
		body, tooBig, err := readBody(r, g.MaxBody)
		if err != nil || tooBig {
			h.ServeHTTP(w, r) // the handler reports the body error (413 or 400) itself
			return
		}
		fp := g.fingerprint(r, body)
		scope := hashHex(g.credential(r))
		skey := scope + ":k:" + key
		if !explicit {
			skey = scope + ":r:" + fp
		}
		g.serve(w, r, h, fail, skey, fp, explicit || retry > 0)
	})
}

// serve claims skey, or replays / waits for its entry. follow says a held key means "this is a repeat"
// (explicit keys and retries); a first attempt without a key that finds the key taken attaches to the
// identical request still running, replays an answer whose client went away, and otherwise just runs.
func (g *Guard) serve(w http.ResponseWriter, r *http.Request, h http.Handler, fail ErrorWriter, skey, fp string, follow bool) {
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		existing, err := g.Store.Claim(ctx, skey, fp, g.pending(r))
		if err != nil {
			fail(w, http.StatusServiceUnavailable, "idempotency_unavailable", "the idempotency store is unavailable; retry later")
			return
		}
		if existing == nil {
			g.run(w, r, h, skey)
			return
		}
		if !follow && existing.Done && (existing.Response == nil || !existing.Response.Abandoned) {
			h.ServeHTTP(w, r) // a deliberate repeat of an answered identical body, not a retry: run it, unrecorded
			return
		}
		if existing.Fingerprint != fp {
			g.Event(EventMismatch)
			fail(w, http.StatusBadRequest, "idempotency_key_reused",
				"this Idempotency-Key was already used with a different request body; use a new key for a new request")
			return
		}
		if !existing.Done {
			g.Event(EventAttached)
			if existing, err = g.Store.Wait(ctx, skey); err != nil {
				if ctx.Err() == nil {
					fail(w, http.StatusServiceUnavailable, "idempotency_unavailable", "the idempotency store is unavailable; retry later")
				}
				return
			}
			if existing == nil || !existing.Done {
				if attempt >= 3 {
					fail(w, http.StatusConflict, "idempotency_in_progress", "another request with this Idempotency-Key keeps failing to finish; retry later")
					return
				}
				continue // the first run recorded nothing (429, cancelled): claim and run
			}
		}
		if existing.Response != nil && existing.Response.Lost {
			g.Event(EventLost)
		} else {
			g.Event(EventReplayed)
		}
		replay(w, existing.Response, fail)
		return
	}
}

func (g *Guard) pending(r *http.Request) time.Duration {
	if g.PendingFor != nil {
		if d := g.PendingFor(r); d > 0 {
			return d
		}
	}
	if g.Pending > 0 {
		return g.Pending
	}
	return g.ttl()
}

// run executes h under a held claim and records what it answered, unless the answer says nothing ran.
func (g *Guard) run(w http.ResponseWriter, r *http.Request, h http.Handler, skey string) {
	rr := r
	if g.Detach != nil {
		ctx, cancel := g.Detach(r)
		defer cancel()
		rr = r.WithContext(ctx)
	}
	rec := &recorder{ResponseWriter: w, client: r.Context()}
	h.ServeHTTP(rec, rr)
	// A store call must not be lost to the client going away.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	if rec.status == 0 || rec.status == http.StatusTooManyRequests || rec.status == http.StatusServiceUnavailable {
		g.Event(EventReleased)
		_ = g.Store.Release(sctx, skey)
		return
	}
	resp := &Response{Status: rec.status, Header: rec.header, Body: rec.body.Bytes(), Abandoned: rec.abandoned}
	if err := g.Store.Finish(sctx, skey, resp, g.ttl()); err != nil {
		_ = g.Store.Release(sctx, skey)
		return
	}
}

// replay writes a recorded response with the replay header.
func replay(w http.ResponseWriter, resp *Response, fail ErrorWriter) {
	if resp.Lost {
		fail(w, http.StatusBadGateway, "outcome_unknown",
			"the first request with this Idempotency-Key was cut off (the server handling it stopped) after it may have run; it is not run again")
		return
	}
	if resp.TooLarge {
		fail(w, http.StatusConflict, "idempotency_response_too_large",
			"the request with this Idempotency-Key ran, but its response was too large to keep for replay; it is not run again")
		return
	}
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = append([]string(nil), vs...)
	}
	h.Set(HeaderReplayed, "true")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// recorder passes everything through and keeps a copy of the status, headers and body. abandoned: the
// client (whose request context is client) was gone when the answer began, or a write to it failed.
type recorder struct {
	http.ResponseWriter
	client    context.Context
	status    int
	header    http.Header
	body      bytes.Buffer
	abandoned bool
}

func (rc *recorder) WriteHeader(code int) {
	if rc.status == 0 {
		rc.status = code
		rc.abandoned = rc.client != nil && rc.client.Err() != nil
		rc.header = rc.ResponseWriter.Header().Clone()
		rc.header.Del("X-Request-Id") // each response has its own
		rc.header.Del("Date")
	}
	rc.ResponseWriter.WriteHeader(code)
}

func (rc *recorder) Write(b []byte) (int, error) {
	if rc.status == 0 {
		rc.WriteHeader(http.StatusOK)
	}
	rc.body.Write(b)
	n, err := rc.ResponseWriter.Write(b)
	if err != nil {
		rc.abandoned = true
		return len(b), nil // the client went away; the run's answer is still recorded for its retry
	}
	return n, nil
}

func (rc *recorder) Flush() {
	if f, ok := rc.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (rc *recorder) Unwrap() http.ResponseWriter { return rc.ResponseWriter }

func retryCount(r *http.Request) (int, bool) {
	v := r.Header.Get(HeaderRetryCount)
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

func validKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyBytes {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// readBody reads the body up to max bytes and puts it back for the handler. tooBig: the body exceeds max
// (the handler then reads the rest itself).
func readBody(r *http.Request, max int64) ([]byte, bool, error) {
	if max <= 0 {
		max = 10 << 20
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), errReader{err}))
		return nil, false, err
	}
	if int64(len(b)) > max {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
		return nil, true, nil
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, false, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func (g *Guard) credential(r *http.Request) string {
	if g.Credential == nil {
		return ""
	}
	return g.Credential(r)
}

// fingerprint is a hash of what makes two requests the same: method, path, the listed headers, body.
func (g *Guard) fingerprint(r *http.Request, body []byte) string {
	s := sha256.New()
	for _, part := range []string{r.Method, r.URL.Path} {
		s.Write([]byte(part))
		s.Write([]byte{0})
	}
	for _, h := range g.FingerprintHeaders {
		s.Write([]byte(r.Header.Get(h)))
		s.Write([]byte{0})
	}
	s.Write(body)
	return hex.EncodeToString(s.Sum(nil))
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}
