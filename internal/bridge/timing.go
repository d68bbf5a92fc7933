package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"strings"
	"time"
)

// Backoff is the reconnect delay of §6.5 for a retry attempt (0-based) and a
// uniform r in [0,1): floor(min(30000, 1000·2^attempt)·(0.5+0.5·r)) ms.
func Backoff(attempt int, r float64) time.Duration {
	base := 30000.0
	if attempt < 15 {
		base = min(30000, 1000*math.Pow(2, float64(max(attempt, 0))))
	}
	return time.Duration(math.Floor(base*(0.5+0.5*r))) * time.Millisecond
}

// HeartbeatInterval is max(25 ms, floor(leaseTtlMs/2)) (§6.7).
func HeartbeatInterval(leaseTTLMs int64) time.Duration {
	return time.Duration(max(25, leaseTTLMs/2)) * time.Millisecond
}

// DefaultPolicy is the policy text when CODELLM_POLICY is unset.
const DefaultPolicy = "default-deny"

// PolicyDigest is hex(sha256(policy ‖ extra)) of §8.1: extra is empty unless
// commands are enabled, then "\0codellm-embedded\0" followed by the sorted,
// de-duplicated allowed domains joined by "\0".
func PolicyDigest(policy string, commandsEnabled bool, allowedDomains []string) string {
	s := policy
	if commandsEnabled {
		d := slices.Clone(allowedDomains)
		slices.Sort(d)
		d = slices.Compact(d)
		s += "\x00codellm-embedded\x00" + strings.Join(d, "\x00")
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
