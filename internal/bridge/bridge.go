// Package bridge is the wire contract between a codellm worker and a hub
// (spec bridge-protocol.md, protocol version 1): the request and response
// types with their validators, the one canonical JSON encoder that signing,
// verification and settlement comparison share, Ed25519 request signing and
// verification, the error codes with their HTTP statuses, and capability
// negotiation. Both `codellm worker` and `codellm hub` build on it, so the two
// ends cannot drift apart.
package bridge

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"math"
	"regexp"
	"strings"
	"time"
)

// ProtocolVersion is the only protocol version this package speaks.
const ProtocolVersion = 1

// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER; protocol integers
// must stay within it so both ends agree on their value.
const MaxSafeInteger = 1<<53 - 1

// Header names of a signed request (§4.2).
const (
	HeaderTimestamp = "X-LibreChat-Code-Timestamp"
	HeaderNonce     = "X-LibreChat-Code-Nonce"
	HeaderSignature = "X-LibreChat-Code-Signature"
)

// TimeLayout is JavaScript's Date.prototype.toISOString format.
const TimeLayout = "2006-01-02T15:04:05.000Z"

var (
	workerIDRe      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	incarnationIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)
	hexDigestRe     = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// ValidWorkerID reports whether id is a legal worker (or workspace, tenant,
// principal) ID.
func ValidWorkerID(id string) bool { return workerIDRe.MatchString(id) }

// ValidIncarnationID reports whether id is a legal incarnation ID.
func ValidIncarnationID(id string) bool { return incarnationIDRe.MatchString(id) }

// ValidAssignmentID accepts what the hub mints (18 bytes base64url) and what
// a reference hub might: the incarnation ID alphabet and length.
func ValidAssignmentID(id string) bool { return incarnationIDRe.MatchString(id) }

// ValidToken reports whether a lease token or credential is long enough.
func ValidToken(t string) bool { return len(t) >= 32 }

// IsSafeInteger reports whether f is an integer a JavaScript peer can hold
// exactly.
func IsSafeInteger(f float64) bool {
	return !math.IsNaN(f) && !math.IsInf(f, 0) && f == math.Trunc(f) && math.Abs(f) <= MaxSafeInteger
}

// FormatTime renders t as toISOString does.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// ParseTime accepts any RFC 3339 instant (spec §15).
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return t, nil
}

// randomB64 returns n random bytes in unpadded base64url.
func randomB64(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand never fails on Linux ≥ 3.17; if it does, nothing
		// secret can be minted, so stopping is the only safe choice.
		panic("bridge: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// NewID mints an assignment ID, incarnation ID or nonce (18 random bytes).
func NewID() string { return randomB64(18) }

// NewSecret mints a lease token or credential (32 random bytes).
func NewSecret() string { return randomB64(32) }

// NewPairingCode mints a pairing code (24 random bytes, 32 chars).
func NewPairingCode() string { return randomB64(24) }

// SHA256Hex is lowercase hex sha256, the digest the protocol uses for
// bodies, credentials, tokens and nonces.
func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// HashSecret is the stored form of a credential, lease token, code or nonce.
func HashSecret(s string) string { return SHA256Hex([]byte(s)) }

// EscapeWorkerID encodes a worker ID for a path segment the way JavaScript
// encodeURIComponent does (url.PathEscape would leave ':' alone).
func EscapeWorkerID(id string) string {
	const unreserved = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.!~*'()"
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		if strings.IndexByte(unreserved, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte("0123456789ABCDEF"[c>>4])
		b.WriteByte("0123456789ABCDEF"[c&0xF])
	}
	return b.String()
}

// Paths of the bridge routes relative to the base URL (which already ends in
// "/v1" or similar).
func PathRedeem() string                     { return "/bridge/pairings/redeem" }
func PathRegister() string                   { return "/bridge/workers/register" }
func PathPairings() string                   { return "/bridge/pairings" }
func PathReady(workerID string) string       { return workerPath(workerID, "ready") }
func PathLease(workerID string) string       { return workerPath(workerID, "lease") }
func PathRefresh(workerID string) string     { return workerPath(workerID, "credentials/refresh") }
func PathReset(workerID string) string       { return workerPath(workerID, "workspaces/reset") }
func PathRevoke(workerID string) string      { return workerPath(workerID, "revoke") }
func PathStatus(workerID string) string      { return workerPath(workerID, "status") }
func PathAck(workerID, aid string) string    { return assignmentPath(workerID, aid, "ack") }
func PathSettle(workerID, aid string) string { return assignmentPath(workerID, aid, "settle") }
func PathCancellation(workerID, aid string) string {
	return assignmentPath(workerID, aid, "cancellation")
}

func workerPath(workerID, tail string) string {
	return "/bridge/workers/" + EscapeWorkerID(workerID) + "/" + tail
}

func assignmentPath(workerID, aid, tail string) string {
	return "/bridge/workers/" + EscapeWorkerID(workerID) + "/assignments/" + aid + "/" + tail
}
