package hook

import (
	"encoding/hex"
	"testing"
)

// TestChaCha20Vector checks the keystream against RFC 8439 appendix A.1,
// test vector #1 (all-zero key and nonce, block counter 0).
func TestChaCha20Vector(t *testing.T) {
	out := make([]byte, 64)
	ChaCha20(make([]byte, 32), out)
	const want = "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7" +
		"da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
	if got := hex.EncodeToString(out); got != want {
		t.Fatalf("keystream block 0 = %s, want %s", got, want)
	}
}
