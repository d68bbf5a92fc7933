//go:build linux && (amd64 || arm64)

package rawchild

import (
	"encoding/hex"
	"testing"
)

// The feeder's keystream is ChaCha20's: RFC 8439 appendix A.1, test vector
// 1 (all-zero key and nonce, block 0), and the counter moves on.
func TestChaChaKeystream(t *testing.T) {
	st := ChaChaState([32]byte{})
	var out [feedChunk]byte
	chachaBlockTo(&st, &out, 0)
	chachaBlockTo(&st, &out, 64)
	want := "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7" +
		"da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
	if got := hex.EncodeToString(out[:64]); got != want {
		t.Errorf("block 0 = %s, want %s", got, want)
	}
	if st[12] != 2 || out[64] == 0 && out[65] == 0 && out[66] == 0 {
		t.Errorf("counter %d after two blocks, second block %x", st[12], out[64:68])
	}
}
