package hub

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// Per-caller rate limits, as the Code API applies them (LibreChat-AI/code-interpreter
// service/src/middleware/limits.ts): /v1/exec, uploads, downloads and file listings each allow a number
// of requests per window to one caller, and answer 429 past it with Retry-After and the draft-6
// RateLimit-* headers: /v1/exec with {error: "rate_limited", message, retry_after_seconds}, the file
// routes with {error: "<sentence>"}, as upstream. The count lives in the hub's store, so that every replica of a shared store
// counts against the same budget (upstream keeps it in its Redis), in fixed windows as upstream's store
// does. A caller is the API key's tenant and user (or, for a key without a user, the key itself).

// RateLimit is one limit: at most Max requests per Window.
type RateLimit struct {
	Max    int
	Window time.Duration
}

// RateLimits are the hub's per-caller limits (Config.RateLimits); zero fields take upstream's defaults.
// Off turns them all off.
type RateLimits struct {
	Off                             bool
	Exec, Upload, Download, Listing RateLimit
}

// Upstream's defaults (config.ts: EXEC_MAX_REQUESTS per EXEC_LIMIT_WINDOW, and so on).
var defaultRateLimits = map[string]RateLimit{
	"exec": {20, 30 * time.Second}, "upload": {30, 5 * time.Minute},
	"download": {60, time.Minute}, "fetch": {120, time.Minute},
}

func (l *RateLimits) defaults() {
	for name, p := range l.fields() {
		d := defaultRateLimits[name]
		if p.Max <= 0 {
			p.Max = d.Max
		}
		if p.Window <= 0 {
			p.Window = d.Window
		}
	}
}

// fields are the limits by upstream's limiter name (the store key's part).
func (l *RateLimits) fields() map[string]*RateLimit {
	return map[string]*RateLimit{"exec": &l.Exec, "upload": &l.Upload, "download": &l.Download, "fetch": &l.Listing}
}

// limiter is one limit of the hub, with upstream's sentence for its 429.
type limiter struct {
	name    string
	limit   RateLimit
	message string
}

// limiters are the hub's limiters; each nil when the limits are off.
type limiters struct{ exec, upload, download, fetch *limiter }

func newLimiters(l RateLimits) *limiters {
	if l.Off {
		return &limiters{}
	}
	return &limiters{
		exec:     &limiter{"exec", l.Exec, "Too many CodeAPI execution requests."},
		upload:   &limiter{"upload", l.Upload, "Too many file uploads."},
		download: &limiter{"download", l.Download, "Too many file downloads."},
		fetch:    &limiter{"fetch", l.Listing, "Too many file list requests."},
	}
}

// forFile is the limiter of a file route (nil: none; upstream limits no object or delete route with
// these).
func (ls *limiters) forFile(path string) *limiter {
	switch {
	case path == "/v1/upload" || path == "/v1/upload/batch":
		return ls.upload
	case strings.HasPrefix(path, "/v1/download/"):
		return ls.download
	case strings.HasPrefix(path, "/v1/files/") && strings.Count(path, "/") == 3:
		return ls.fetch
	}
	return nil
}

// rateLimited runs serve after admitting the request against l (nil: no limit), refusing in the
// route's envelope with write.
func (h *Hub) rateLimited(l *limiter, write func(http.ResponseWriter, *clientError), serve func(http.ResponseWriter, *http.Request, *ClientKey)) func(http.ResponseWriter, *http.Request, *ClientKey) {
	return func(w http.ResponseWriter, r *http.Request, key *ClientKey) {
		if ce := h.admit(r.Context(), w, l, key); ce != nil {
			write(w, ce)
			return
		}
		serve(w, r, key)
	}
}

// writeFileLimit answers a file route's 429 as upstream's file limiters do, {"error": "<sentence>"}
// with Retry-After (only its exec limiter has the structured body); other refusals (the store's) in the
// file routes' envelope.
func writeFileLimit(w http.ResponseWriter, ce *clientError) {
	if ce.code != "rate_limited" {
		writeExecError(w, ce)
		return
	}
	w.Header().Set("Retry-After", strconv.Itoa(ce.retryAfter))
	o := &bridge.Object{}
	o.Set("error", ce.message)
	b, _ := bridge.Canonical(o)
	writeJSON(w, ce.status, b)
}

// caller is who a limit counts: the tenant and the key's user, or a hash of the key itself.
func caller(k *ClientKey) string {
	if k.UserID != "" {
		return k.TenantID + ":user:" + k.UserID
	}
	sum := sha256.Sum256([]byte(k.Key))
	return k.TenantID + ":key:" + hex.EncodeToString(sum[:12])
}

// admit counts one request of k against l and sets the RateLimit-* headers. It returns the 429 to
// answer when the window's budget is spent (the request is then not counted), or 503 store_unavailable
// when the store cannot count: a limit that cannot be checked refuses, it does not wave through.
func (h *Hub) admit(ctx context.Context, w http.ResponseWriter, l *limiter, k *ClientKey) *clientError {
	if l == nil {
		return nil
	}
	n, reset, err := l.take(ctx, h.replica.b, caller(k))
	h.storeFailed("rate_limit", err)
	if err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			return errStoreUnavailable()
		}
		h.cfg.Logger.Error("rate limit: store failed", "limiter", l.name, "err", err)
		return &clientError{status: http.StatusInternalServerError, code: "internal_error", message: "Internal hub error"}
	}
	secs := max(1, int((time.Until(reset)+time.Second-1)/time.Second))
	hdr := w.Header()
	hdr.Set("RateLimit-Policy", fmt.Sprintf("%d;w=%d", l.limit.Max, int(l.limit.Window/time.Second)))
	hdr.Set("RateLimit-Limit", strconv.Itoa(l.limit.Max))
	hdr.Set("RateLimit-Remaining", strconv.Itoa(max(0, l.limit.Max-n)))
	hdr.Set("RateLimit-Reset", strconv.Itoa(secs))
	if n <= l.limit.Max {
		return nil
	}
	h.cfg.Logger.Warn("rate limit rejected", "limiter", l.name, "tenant", k.TenantID, "retry_after_seconds", secs)
	label := strconv.Itoa(secs) + " seconds"
	if secs == 1 {
		label = "1 second"
	}
	return &clientError{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: secs,
		message: l.message + " Please retry in " + label + "."}
}

// take counts one request of who in the current window and returns the count with it (max+1 when the
// budget was already spent: that request is not recorded) and the window's end. One transaction, so
// replicas sharing the store never both take the last request of a window.
func (l *limiter) take(ctx context.Context, b store.Backend, who string) (n int, reset time.Time, err error) {
	key := "rl:" + l.name + ":" + who
	err = b.Update(ctx, func(tx store.Txn) error {
		now := tx.Now()
		v, err := tx.Get(key)
		if err != nil {
			return err
		}
		count, end := 0, now.Add(l.limit.Window)
		if rec := v[0]; rec != nil {
			if len(rec) != 16 {
				return store.Abort(fmt.Errorf("%w: rate limit record %s", store.ErrCorrupt, key))
			}
			if e := time.Unix(0, int64(binary.BigEndian.Uint64(rec[8:]))); now.Before(e) {
				count, end = int(binary.BigEndian.Uint64(rec[:8])), e
			}
		}
		n, reset = count+1, end
		if count >= l.limit.Max {
			return nil // spent: nothing written
		}
		rec := make([]byte, 16)
		binary.BigEndian.PutUint64(rec, uint64(count+1))
		binary.BigEndian.PutUint64(rec[8:], uint64(end.UnixNano()))
		tx.Put(key, rec, store.Volatile, end)
		return nil
	})
	return n, reset, err
}
