package hub

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// jwtNow is the clock of the verifier tests.
var jwtNow = time.Unix(1_780_000_000, 0)

// testEdKey is a fixed Ed25519 key, so tokens are reproducible.
var testEdKey = ed25519.NewKeyFromSeed([]byte("codellm-hub-client-jwt-test-seed"))

var (
	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
)

func testRSAKey(t testing.TB) *rsa.PrivateKey {
	rsaOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		rsaKey = k
	})
	return rsaKey
}

// signJWT signs header and payload JSON as LibreChat's signJwt does: base64url segments, EdDSA over the
// signing input, or RS256 (PKCS#1 v1.5 over its SHA-256).
func signJWT(t testing.TB, key crypto.Signer, header, payload string) string {
	t.Helper()
	b64 := base64.RawURLEncoding
	input := b64.EncodeToString([]byte(header)) + "." + b64.EncodeToString([]byte(payload))
	var sig []byte
	var err error
	switch k := key.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(k, []byte(input))
	case *rsa.PrivateKey:
		sum := sha256.Sum256([]byte(input))
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, sum[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + b64.EncodeToString(sig)
}

// authContextHash is LibreChat's canonicalContextHash: SHA-256 of the JSON of these members in this order.
func authContextHash(sub, tenant, role, source string) string {
	b, _ := json.Marshal(struct {
		ChcUserID       string `json:"chc_user_id"`
		OrgID           string `json:"org_id"`
		PrincipalSource string `json:"principal_source"`
		Role            string `json:"role"`
		ServiceID       string `json:"service_id"`
		Sub             string `json:"sub"`
		TenantID        string `json:"tenant_id"`
	}{PrincipalSource: source, Role: role, Sub: sub, TenantID: tenant})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// lcClaims are the claims LibreChat's buildClaims mints for a user at now, as a map the tests mutate.
func lcClaims(now time.Time, sub, tenant, worker string) map[string]any {
	c := map[string]any{
		"iss": "librechat", "aud": "codeapi", "sub": sub, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Unix() + 300,
		"jti": "9b2f7a9e-4c1d-4e0b-9a51-0d6f3c2b8e11", "tenant_id": tenant, "role": "USER", "principal_source": "librechat_jwt",
		"auth_context_hash": authContextHash(sub, tenant, "USER", "librechat_jwt"),
	}
	if worker != "" {
		c["code_worker_id"] = worker
	}
	return c
}

const lcHeader = `{"alg":"EdDSA","typ":"JWT","kid":"lc-codeapi-2026-05"}`

func mintLC(t testing.TB, claims map[string]any) string {
	b, _ := json.Marshal(claims)
	return signJWT(t, testEdKey, lcHeader, string(b))
}

func testClientJWT(t testing.TB) *ClientJWT {
	c := &ClientJWT{Keys: map[string]crypto.PublicKey{
		DefaultClientJWTKID: testEdKey.Public(),
		"rsa-1":             &testRSAKey(t).PublicKey,
	}, now: func() time.Time { return jwtNow }}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientJWTLibreChatToken verifies a token laid out byte for byte as LibreChat's mintCodeApiToken
// writes it (header and claims in its member order) and maps it to the identity the hub uses.
func TestClientJWTLibreChatToken(t *testing.T) {
	c := testClientJWT(t)
	payload := `{"iss":"librechat","aud":"codeapi","sub":"6650c0ffee0000000000abcd","iat":1780000000,"nbf":1780000000,` +
		`"exp":1780000300,"jti":"9b2f7a9e-4c1d-4e0b-9a51-0d6f3c2b8e11","tenant_id":"acme","role":"USER",` +
		`"principal_source":"librechat_jwt","code_worker_id":"vm-a","auth_context_hash":"` +
		authContextHash("6650c0ffee0000000000abcd", "acme", "USER", "librechat_jwt") + `"}`
	k, err := c.verify(signJWT(t, testEdKey, lcHeader, payload))
	if err != nil {
		t.Fatal(err)
	}
	want := ClientKey{Key: "jwt:acme:6650c0ffee0000000000abcd", TenantID: "acme", UserID: "6650c0ffee0000000000abcd",
		Roles: []string{"USER"}, CodeWorkerID: "vm-a", signed: true}
	if k.Key != want.Key || k.TenantID != want.TenantID || k.UserID != want.UserID || strings.Join(k.Roles, ",") != "USER" ||
		k.CodeWorkerID != want.CodeWorkerID || !k.signed {
		t.Fatalf("identity %+v, want %+v", *k, want)
	}
	// RS256, LibreChat's other algorithm, with an audience array.
	claims := lcClaims(jwtNow, "u1", "acme", "")
	claims["aud"] = []string{"other", "codeapi"}
	b, _ := json.Marshal(claims)
	if _, err := c.verify(signJWT(t, testRSAKey(t), `{"alg":"RS256","typ":"JWT","kid":"rsa-1"}`, string(b))); err != nil {
		t.Fatal("RS256:", err)
	}
	// No tenant_id: the single-tenant default, as upstream.
	delete(claims, "tenant_id")
	claims["aud"] = "codeapi"
	if k, err := c.verify(mintLC(t, claims)); err != nil || k.TenantID != "legacy" {
		t.Fatalf("no tenant_id: %v %v", k, err)
	}
}

// TestClientJWTRefusals is differential: each token differs from an accepted one in one respect, and
// each is refused with the Code API's reason for it.
func TestClientJWTRefusals(t *testing.T) {
	c := testClientJWT(t)
	good := lcClaims(jwtNow, "u1", "acme", "vm-a")
	with := func(mut func(m map[string]any)) string {
		m := map[string]any{}
		for k, v := range good {
			m[k] = v
		}
		mut(m)
		return mintLC(t, m)
	}
	if _, err := c.verify(with(func(map[string]any) {})); err != nil {
		t.Fatal("the unmutated token is refused:", err)
	}
	goodPayload, _ := json.Marshal(good)
	now := jwtNow.Unix()
	edTok := mintLC(t, good)
	parts := strings.Split(edTok, ".")
	for _, tc := range []struct {
		name, tok, reason string
	}{
		{"two segments", parts[0] + "." + parts[1], "malformed"},
		{"header not base64url", "%%%." + parts[1] + "." + parts[2], "malformed"},
		{"payload not JSON", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte("nope")) + "." + parts[2], "malformed"},
		{"alg none", signJWT(t, testEdKey, `{"alg":"none","typ":"JWT","kid":"lc-codeapi-2026-05"}`, string(goodPayload)), "wrong_alg"},
		{"alg HS256", signJWT(t, testEdKey, `{"alg":"HS256","typ":"JWT","kid":"lc-codeapi-2026-05"}`, string(goodPayload)), "wrong_alg"},
		{"typ JWE", signJWT(t, testEdKey, `{"alg":"EdDSA","typ":"JWE","kid":"lc-codeapi-2026-05"}`, string(goodPayload)), "malformed"},
		{"no kid", signJWT(t, testEdKey, `{"alg":"EdDSA","typ":"JWT"}`, string(goodPayload)), "malformed_claims"},
		{"unknown kid", signJWT(t, testEdKey, `{"alg":"EdDSA","typ":"JWT","kid":"lc-codeapi-2099-01"}`, string(goodPayload)), "unknown_kid"},
		{"RS256 header on the Ed25519 kid", signJWT(t, testRSAKey(t), `{"alg":"RS256","typ":"JWT","kid":"lc-codeapi-2026-05"}`, string(goodPayload)), "wrong_alg"},
		{"signed by another key", signJWT(t, ed25519.NewKeyFromSeed(make([]byte, 32)), lcHeader, string(goodPayload)), "bad_signature"},
		{"payload changed after signing", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(goodPayload), `"vm-a"`, `"vm-b"`, 1))) + "." + parts[2], "bad_signature"},
		{"no sub", with(func(m map[string]any) { delete(m, "sub") }), "malformed_claims"},
		{"sub not a string", with(func(m map[string]any) { m["sub"] = 42 }), "malformed_claims"},
		{"no jti", with(func(m map[string]any) { delete(m, "jti") }), "malformed_claims"},
		{"jti too long", with(func(m map[string]any) { m["jti"] = strings.Repeat("j", 257) }), "malformed_claims"},
		{"iat a string", with(func(m map[string]any) { m["iat"] = "now" }), "malformed_claims"},
		{"no principal_source", with(func(m map[string]any) { delete(m, "principal_source") }), "malformed_claims"},
		{"untrusted principal_source", with(func(m map[string]any) { m["principal_source"] = "none" }), "malformed_claims"},
		{"no auth_context_hash", with(func(m map[string]any) { delete(m, "auth_context_hash") }), "malformed_claims"},
		{"code_worker_id not a string", with(func(m map[string]any) { m["code_worker_id"] = true }), "malformed_claims"},
		{"other issuer", with(func(m map[string]any) { m["iss"] = "evil" }), "wrong_issuer"},
		{"other audience", with(func(m map[string]any) { m["aud"] = "other" }), "wrong_audience"},
		{"audience array without ours", with(func(m map[string]any) { m["aud"] = []string{"a", "b"} }), "wrong_audience"},
		{"audience array with a number", with(func(m map[string]any) { m["aud"] = []any{"codeapi", 1} }), "malformed_claims"},
		{"no aud", with(func(m map[string]any) { delete(m, "aud") }), "malformed_claims"},
		{"expired past the skew", with(func(m map[string]any) { m["iat"], m["nbf"], m["exp"] = now-400, now-400, now-31 }), "expired"},
		{"not yet valid", with(func(m map[string]any) { m["nbf"] = now + 31 }), "not_yet_valid"},
		{"issued in the future", with(func(m map[string]any) { m["iat"], m["exp"] = now+31, now+100 }), "future_iat"},
		{"exp not after iat", with(func(m map[string]any) { m["exp"] = now }), "malformed_claims"},
		{"lifetime over 300 s", with(func(m map[string]any) { m["exp"] = now + 301 }), "ttl_too_long"},
		{"tenant_id not a tenant ID", with(func(m map[string]any) { m["tenant_id"] = "a b" }), "malformed_claims"},
		{"oversized", strings.Repeat("a", maxJWTBytes+1), "malformed"},
	} {
		_, err := c.verify(tc.tok)
		var je *jwtError
		if !errors.As(err, &je) || je.reason != tc.reason {
			t.Errorf("%s: %v, want reason %s", tc.name, err, tc.reason)
		}
	}
	// Within the 30 s skew both ends are still accepted, as upstream.
	for name, tok := range map[string]string{
		"expired 29 s ago":     with(func(m map[string]any) { m["iat"], m["nbf"], m["exp"] = now-300, now-300, now-29 }),
		"valid in 30 s":        with(func(m map[string]any) { m["nbf"] = now + 30 }),
		"lifetime exactly 300": with(func(m map[string]any) { m["exp"] = now + 300 }),
	} {
		if _, err := c.verify(tok); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestClientJWTKeys reads keys in the forms the Code API's verifier takes: PEM, a JWK, a JWKS.
func TestClientJWTKeys(t *testing.T) {
	spki := func(k crypto.PublicKey) string {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	b64 := base64.RawURLEncoding.EncodeToString
	rk := &testRSAKey(t).PublicKey
	edJWK := `{"kty":"OKP","crv":"Ed25519","x":"` + b64(testEdKey.Public().(ed25519.PublicKey)) + `","kid":"ed-2","alg":"EdDSA"}`
	rsaJWK := `{"kty":"RSA","n":"` + b64(rk.N.Bytes()) + `","e":"` + b64(big.NewInt(int64(rk.E)).Bytes()) + `","kid":"rsa-2"}`

	keys, err := ParseClientJWTKeys("", spki(testEdKey.Public()), "")
	if err != nil || !testEdKey.Public().(ed25519.PublicKey).Equal(keys[DefaultClientJWTKID]) {
		t.Fatalf("PEM under the default kid: %v %v", keys, err)
	}
	// An env file's PEM with escaped newlines, as upstream's normalizePem accepts.
	if keys, err := ParseClientJWTKeys("", strings.ReplaceAll(spki(rk), "\n", `\n`), "rsa-1"); err != nil || !rk.Equal(keys["rsa-1"]) {
		t.Fatalf("escaped RSA PEM: %v %v", keys, err)
	}
	if keys, err := ParseClientJWTKeys("", edJWK, "k"); err != nil || keys["k"] == nil {
		t.Fatalf("JWK: %v %v", keys, err)
	}
	keys, err = ParseClientJWTKeys(`{"keys":[`+edJWK+`,`+rsaJWK+`]}`, "", "")
	if err != nil || len(keys) != 2 || !rk.Equal(keys["rsa-2"]) {
		t.Fatalf("JWKS: %v %v", keys, err)
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	for name, c := range map[string][2]string{
		"private JWK":          {"", strings.Replace(edJWK, `"kid"`, `"d":"secret","kid"`, 1)},
		"RSA 1024":             {"", spki(&small.PublicKey)},
		"not a key":            {"", "hello"},
		"JWKS without kid":     {`{"keys":[` + strings.Replace(edJWK, `,"kid":"ed-2"`, "", 1) + `]}`, ""},
		"JWKS not an object":   {`[1]`, ""},
		"JWK alg mismatch":     {"", strings.Replace(edJWK, `"EdDSA"`, `"RS256"`, 1)},
		"EC key (unsupported)": {"", `{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}`},
	} {
		if _, err := ParseClientJWTKeys(c[0], c[1], "k"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(Config{ClientJWT: &ClientJWT{}}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no keys: %v", err)
	}
}

// BenchmarkClientJWTVerify measures one token check, EdDSA (LibreChat's default) and RS256, and the
// same token again from the verifier's memory (a request authenticates up to three times; LibreChat
// reuses a token for up to 30 s).
func BenchmarkClientJWTVerify(b *testing.B) {
	c := testClientJWT(b)
	claims, _ := json.Marshal(lcClaims(jwtNow, "u1", "acme", "vm-a"))
	for _, bc := range []struct{ name, tok string }{
		{"EdDSA", signJWT(b, testEdKey, lcHeader, string(claims))},
		{"RS256", signJWT(b, testRSAKey(b), `{"alg":"RS256","typ":"JWT","kid":"rsa-1"}`, string(claims))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.verifyToken(bc.tok); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/remembered", func(b *testing.B) {
			for b.Loop() {
				if _, err := c.verify(bc.tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestClientJWTMemory: a remembered token is refused once the verifier would refuse it (at exp + the
// 30 s skew), and the memory stays bounded.
func TestClientJWTMemory(t *testing.T) {
	c := testClientJWT(t)
	clock := jwtNow
	c.now = func() time.Time { return clock }
	tok := mintLC(t, lcClaims(jwtNow, "u1", "acme", ""))
	if _, err := c.verify(tok); err != nil {
		t.Fatal(err)
	}
	clock = jwtNow.Add(300*time.Second + jwtClockSkew - time.Second)
	if _, err := c.verify(tok); err != nil {
		t.Fatal("within the skew:", err)
	}
	clock = jwtNow.Add(300*time.Second + jwtClockSkew)
	var je *jwtError
	if _, err := c.verify(tok); !errors.As(err, &je) || je.reason != "expired" {
		t.Fatalf("remembered token past its expiry: %v", err)
	}
	clock = jwtNow
	for i := range maxSeenTokens + 10 {
		claims := lcClaims(jwtNow, "u1", "acme", "")
		claims["jti"] = strconv.Itoa(i)
		if _, err := c.verify(mintLC(t, claims)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.seen.m); n > maxSeenTokens {
		t.Fatalf("%d tokens remembered", n)
	}
}
