// Package idempotency makes a POST run at most once per (credential, Idempotency-Key): the first request
// claims the key and runs; a repeat within the TTL gets the recorded response byte for byte (status,
// headers, body, streamed or not) with "Idempotent-Replayed: true"; a repeat while the first still runs
// waits for it and gets the same response; the same key with another body is refused with 400
// idempotency_key_reused and runs nothing. Without a key, a request that says it is a client retry
// (X-Stainless-Retry-Count ≥ 1, sent by the Stainless-generated SDKs) of an identical body from the same
// credential attaches to or replays the earlier attempt. A request that carries the header with a count of
// 0 — a first attempt as far as the SDK knows, but also every attempt of a caller that retries around the
// SDK, as LangChain does on its own timeout — attaches to an identical request of the same credential
// that is still running, and replays one that finished within the TTL whose client went away before its
// answer was written; any other identical request runs again. A response that says nothing ran (429, 503,
// or no response because the run was cancelled) is never recorded, so the retry runs.
//
// The package holds the HTTP rule (Guard) and a bounded in-memory Store; the hub keeps its records in
// its shared store behind the same Store interface so that replicas on one Redis agree.
package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Response is a recorded reply. TooLarge marks a reply that ran but was too large to keep: its repeats
// are refused (409) rather than run again. Abandoned marks a reply whose client had gone away before it
// was written: an identical first attempt of a Stainless client (LangChain's own retries) replays it
// instead of running again. Lost marks a claim whose holder died (a hub replica killed mid-run) after the
// run may have started: its repeats get 502 outcome_unknown, never a second run.
type Response struct {
	Status    int         `json:"status"`
	Header    http.Header `json:"header,omitempty"`
	Body      []byte      `json:"body,omitempty"`
	TooLarge  bool        `json:"too_large,omitempty"`
	Abandoned bool        `json:"abandoned,omitempty"`
	Lost      bool        `json:"lost,omitempty"`
}

// Entry is the state of a key: pending (a run holds the claim) or done with its Response.
type Entry struct {
	Fingerprint string    `json:"fingerprint"`
	Done        bool      `json:"done"`
	Response    *Response `json:"response,omitempty"`
}

// Store keeps entries. Keys are opaque (the Guard scopes them by credential). Implementations must make
// Claim atomic: of two concurrent claims of a free key exactly one succeeds.
type Store interface {
	// Claim creates a pending entry for key with fingerprint fp unless a live one exists; it returns nil
	// when the caller now holds the claim, else the existing entry. pending bounds how long a claim may
	// stay pending (a crashed holder's claim expires); ttl is how long the finished entry lives.
	Claim(ctx context.Context, key, fp string, pending time.Duration) (*Entry, error)
	// Finish records the response of a held claim, kept for ttl from now.
	Finish(ctx context.Context, key string, resp *Response, ttl time.Duration) error
	// Release drops a held claim without recording anything: nothing ran, so a retry must run.
	Release(ctx context.Context, key string) error
	// Wait blocks until key is done (returning its entry), is gone (nil), or ctx ends.
	Wait(ctx context.Context, key string) (*Entry, error)
}

// ErrUnavailable wraps store failures; the Guard then refuses the request (503) rather than run it
// unguarded.
var ErrUnavailable = errors.New("idempotency store unavailable")

// Events counted in metrics (codellm_idempotency_events_total{event}).
const (
	EventRecorded = "recorded" // a response was stored
	EventReplayed = "replayed" // a repeat got a stored response
	EventAttached = "attached" // a repeat waited for a running first request
	EventMismatch = "mismatch" // same key, another body: refused
	EventReleased = "released" // nothing ran (429, 503, cancelled): not recorded
	EventEvicted  = "evicted"  // the bound pushed the oldest entry out before its TTL
	EventTooLarge = "too_large"
	EventLost     = "lost" // a repeat found the first request's holder dead: 502 outcome_unknown
)

// Events lists every event, for pre-creating the metric series.
var Events = []string{EventRecorded, EventReplayed, EventAttached, EventMismatch, EventReleased, EventEvicted, EventTooLarge, EventLost}
