package bridge

import (
	"testing"
	"time"
)

func BenchmarkSignRequest(b *testing.B) {
	_, priv, _ := GenerateKey()
	body := []byte(vecC8)
	for b.Loop() {
		SignRequest(priv, vecCredential, "POST", "/v1/bridge/workers/my%3Avm/lease", body, time.Now())
	}
}

func BenchmarkVerify(b *testing.B) {
	pub, priv, _ := GenerateKey()
	s := SigningString("POST", "/v1/bridge/workers/my%3Avm/lease", "2025-06-01T12:00:00.123Z", "AAECAwQFBgcICQoLDA0ODxAR", []byte(vecC8), vecCredential)
	sig := Sign(priv, s)
	for b.Loop() {
		if !Verify(pub, s, sig) {
			b.Fatal("verify")
		}
	}
}

func BenchmarkMarshalSettlement(b *testing.B) {
	r, _ := RawFromJSON([]byte(`{"run":{"stdout":"a<b>&c","stderr":"","code":0,"signal":null,"output":"a<b>&c"},"language":"python","version":"3.12.0"}`))
	s := Settlement{ProtocolVersion: 1, Generation: 7, LeaseToken: vecCredential, IncarnationID: "AAECAwQFBgcICQoLDA0ODxAR", Status: StatusFulfilled, Result: r}
	for b.Loop() {
		if _, err := Marshal(s); err != nil {
			b.Fatal(err)
		}
	}
}
