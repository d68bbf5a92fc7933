package bridge

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const (
	vecPKCS8      = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f\n-----END PRIVATE KEY-----\n"
	vecSPKI       = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAA6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=\n-----END PUBLIC KEY-----\n"
	vecCredential = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8"
	vecC8         = `{"protocolVersion":1,"generation":7,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"fulfilled","result":{"run":{"stdout":"a<b>&c\u2028","stderr":"","code":0,"signal":null,"output":"a<b>&c\u2028"},"language":"python","version":"3.12.0","10":1,"2":2}}`
)

func vectorKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pemPriv, err := MarshalPrivateKeyPEM(priv)
	if err != nil || pemPriv != vecPKCS8 {
		t.Fatalf("PKCS#8 PEM mismatch: %q %v", pemPriv, err)
	}
	pemPub, err := MarshalPublicKeyPEM(priv.Public().(ed25519.PublicKey))
	if err != nil || pemPub != vecSPKI {
		t.Fatalf("SPKI PEM mismatch: %q %v", pemPub, err)
	}
	parsed, err := ParsePrivateKeyPEM(vecPKCS8)
	if err != nil || !parsed.Equal(priv) {
		t.Fatalf("parse PKCS#8: %v", err)
	}
	return priv
}

// Vectors S1 and S2 of spec §4.4.
func TestSignatureVectors(t *testing.T) {
	priv := vectorKey(t)
	pub, err := ParsePublicKeyPEM(vecSPKI)
	if err != nil {
		t.Fatal(err)
	}
	c8, err := Canonicalize([]byte(vecC8))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c8), "\"result\":{\"2\":2,\"10\":1,\"run\"") || !strings.Contains(string(c8), "a<b>&c\xe2\x80\xa8") {
		t.Fatalf("C8 canonical form: %s", c8)
	}
	cases := []struct {
		name, path, ts, nonce string
		body                  []byte
		digest, sig           string
	}{
		{"S1", "/v1/bridge/workers/my%3Avm/lease", "2025-06-01T12:00:00.123Z", "AAECAwQFBgcICQoLDA0ODxAR",
			[]byte(`{"protocolVersion":1,"waitMs":25000,"incarnationId":"AAECAwQFBgcICQoLDA0ODxAR"}`),
			"4c4a45314ec28319f5f533fd1f8dcaf44a10f3e8e5cdf2350b77a228285d1208",
			"JF2OR01oT28dtcgQksiFXydlpQFb0BljcTuRX-Bo63_vNd2a3AVmwIbJuHUXfiwjD7Pb9L0tEQJqzyMpji0dCg"},
		{"S2", "/v1/bridge/workers/my%3Avm/assignments/EhMUFRYXGBkaGxwdHh8gISIj/settle", "2025-06-01T12:00:01.000Z", "ISIjJCUmJygpKissLS4vMDEy",
			c8, "d12587727e005a2a7f88a94c25d71710c21cbf7953f9488895960d65ca47ffdd",
			"4tReeGHWDVGfTETN2Qxt_S3_jraw9SZRvziz6M5FfKg5jU4BbKur75VfoxKtnlR0IyAqEr4xpWY-PPW45or5Bg"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := SHA256Hex(c.body); d != c.digest {
				t.Fatalf("digest %s", d)
			}
			s := SigningString("post", c.path, c.ts, c.nonce, c.body, vecCredential)
			if got := Sign(priv, s); got != c.sig {
				t.Fatalf("signature\ngot  %s\nwant %s", got, c.sig)
			}
			if !Verify(pub, s, c.sig) || !Verify(pub, s, c.sig+"==") {
				t.Fatal("vector does not verify (with and without padding)")
			}
			if Verify(pub, s+"x", c.sig) || Verify(pub, s, c.sig[:len(c.sig)-2]+"AA") || Verify(pub, s, "!!") {
				t.Fatal("tampered input verified")
			}
		})
	}
	if p := "/v1" + PathLease("my:vm"); p != cases[0].path {
		t.Fatalf("lease path %s", p)
	}
	if p := "/v1" + PathSettle("my:vm", "EhMUFRYXGBkaGxwdHh8gISIj"); p != cases[1].path {
		t.Fatalf("settle path %s", p)
	}
}

func TestParsePublicKeyRejects(t *testing.T) {
	rk, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	rsaPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	for _, s := range []string{rsaPEM, "", "garbage", vecPKCS8, strings.Repeat("A", 5000),
		strings.Replace(vecSPKI, "PUBLIC KEY", "RSA PUBLIC KEY", 2), vecSPKI + vecSPKI} {
		if _, err := ParsePublicKeyPEM(s); !errors.Is(err, ErrKeyInvalid) {
			t.Errorf("accepted %.40q: %v", s, err)
		}
	}
}

func TestSignRequestRoundTrip(t *testing.T) {
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"protocolVersion":1}`)
	now := time.Date(2025, 6, 1, 12, 0, 0, 123e6, time.UTC)
	p := SignRequest(priv, vecCredential, http.MethodPost, "/v1/bridge/workers/a%3Ab/lease", body, now)
	if p.Timestamp != "2025-06-01T12:00:00.123Z" || len(p.Nonce) != 24 {
		t.Fatalf("proof %+v", p)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/bridge/workers/a%3Ab/lease?x=1", nil)
	p.Apply(r.Header)
	r.Header.Set("Authorization", "  bridge   "+vecCredential+" ")
	got, ok := ProofFromHeaders(r.Header)
	if !ok || got != p {
		t.Fatalf("headers: %+v %v", got, ok)
	}
	if RequestPath(r) != "/v1/bridge/workers/a%3Ab/lease" {
		t.Fatalf("path %s", RequestPath(r))
	}
	if !Verify(pub, SigningString("POST", RequestPath(r), got.Timestamp, got.Nonce, body, got.Credential), got.Signature) {
		t.Fatal("round trip does not verify")
	}
	r.Header.Set("Authorization", "Bearer "+vecCredential)
	if _, ok := ProofFromHeaders(r.Header); ok {
		t.Fatal("Bearer scheme accepted as a proof")
	}
	r.Header.Set("Authorization", "Bridge "+vecCredential)
	r.Header.Del(HeaderNonce)
	if _, ok := ProofFromHeaders(r.Header); ok {
		t.Fatal("missing nonce accepted")
	}
}

func TestIDsAndEscaping(t *testing.T) {
	if EscapeWorkerID("my:vm.a_b-c") != "my%3Avm.a_b-c" {
		t.Fatal(EscapeWorkerID("my:vm.a_b-c"))
	}
	for _, id := range []string{"a", "my-vm", "A1._:-", strings.Repeat("a", 128)} {
		if !ValidWorkerID(id) {
			t.Errorf("valid %q rejected", id)
		}
	}
	for _, id := range []string{"", "-a", ".a", "a/b", "a b", strings.Repeat("a", 129), "é"} {
		if ValidWorkerID(id) {
			t.Errorf("invalid %q accepted", id)
		}
	}
	if id := NewID(); len(id) != 24 || !ValidIncarnationID(id) {
		t.Fatal(id)
	}
	if s := NewSecret(); len(s) != 43 || !ValidToken(s) {
		t.Fatal(s)
	}
	if c := NewPairingCode(); len(c) != 32 {
		t.Fatal(c)
	}
	if ValidIncarnationID("short") || ValidIncarnationID("AAECAwQFBgcICQoL:") {
		t.Fatal("bad incarnation accepted")
	}
	ts, err := ParseTime("2025-06-01T14:00:00.5+02:00")
	if err != nil || FormatTime(ts) != "2025-06-01T12:00:00.500Z" {
		t.Fatalf("%v %v", ts, err)
	}
}

func TestErrorStatusesAndEnvelope(t *testing.T) {
	want := map[Code]int{
		CodePublicKeyInvalid: 400, CodePairingInvalid: 401, CodeCredentialInvalid: 401, CodeProofInvalid: 401,
		CodeProofReplayed: 401, CodeWorkerUnauthorized: 403, CodeAssignmentNotFound: 404, CodeWorkerFenced: 409,
		CodeWorkerQuarantined: 409, CodeWorkspaceQuarantined: 409, CodeAssignmentFenced: 409,
		CodeAssignmentExpired: 409, CodeWorkerMismatch: 409, CodeWorkerOffline: 409, CodeAssignmentInvalid: 409,
		CodeResultInvalid: 409, CodeBodyTooLarge: 413, CodeWorkerBusy: 503,
	}
	for c, s := range want {
		if c.HTTPStatus() != s {
			t.Errorf("%s: %d", c, c.HTTPStatus())
		}
	}
	rec := httptest.NewRecorder()
	WriteError(rec, ErrWorkerFenced)
	if rec.Code != 409 || rec.Body.String() != `{"error":"Bridge worker incarnation is fenced","code":"WORKER_FENCED"}` {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	dec := DecodeError(rec.Code, rec.Body.Bytes())
	if !errors.Is(dec, ErrWorkerFenced) || errors.Is(dec, ErrWorkerBusy) {
		t.Fatalf("decoded %v", dec)
	}
	rec = httptest.NewRecorder()
	WriteError(rec, errors.New("secret internal detail"))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}
