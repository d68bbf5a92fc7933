package execmanifest

import (
	"testing"
	"time"
)

// BenchmarkVerifyRequest is the per-execute cost the worker adds with the file relay on: decoding,
// canonical check, Ed25519 verification and binding the golden manifest to its body (hash included).
func BenchmarkVerifyRequest(b *testing.B) {
	g, key, body := loadGolden(b)
	now := time.Unix(g.Now, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VerifyRequest(g.Token, key, body, now); err != nil {
			b.Fatal(err)
		}
	}
}
