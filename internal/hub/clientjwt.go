package hub

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// The signed per-user client token, beside static keys (issue 40 item 3). LibreChat mints it when
// CODEAPI_JWT_ENABLED is on (packages/api/src/auth/codeapi.ts): a compact JWS, EdDSA (Ed25519) by default or
// RS256, header {alg, typ: "JWT", kid}, claims iss, aud, sub, iat, nbf, exp (a lifetime of at most 300 s),
// jti, tenant_id, role, principal_source, auth_context_hash and optionally code_worker_id, the worker the
// user's stateful environment is attached to. The hub checks it as the Code API's verifier does
// (service/src/auth/librechat-jwt.ts): the same required claims, the same limits, the same order of
// checks, with the standard library's crypto.

// Defaults of LibreChat's minter and the Code API's verifier.
const (
	DefaultClientJWTIssuer   = "librechat"
	DefaultClientJWTAudience = "codeapi"
	DefaultClientJWTKID      = "lc-codeapi-2026-05"
	// jwtMaxLifetime and jwtClockSkew are the verifier's caps (CODEAPI_JWT_MAX_TTL_SECONDS and
	// CODEAPI_JWT_CLOCK_SKEW_SECONDS may only lower them); LibreChat mints 300 s tokens.
	jwtMaxLifetime = 300 * time.Second
	jwtClockSkew   = 30 * time.Second
	// jwtDefaultTenant is the tenant of a token without tenant_id: LibreChat's and the Code API's
	// single-tenant default (CODEAPI_JWT_SINGLE_TENANT_ID).
	jwtDefaultTenant = "legacy"
	// maxJWTBytes bounds what is decoded before the signature is checked.
	maxJWTBytes = 16 << 10
)

// ClientJWT configures signed client tokens. Keys are by kid: an ed25519.PublicKey (EdDSA) or an
// *rsa.PublicKey of at least 2048 bits (RS256).
type ClientJWT struct {
	Issuer   string // default DefaultClientJWTIssuer
	Audience string // default DefaultClientJWTAudience
	Keys     map[string]crypto.PublicKey
	// now is the verifier's clock (tests pin it); nil: time.Now.
	now func() time.Time
	// seen remembers tokens already verified (tokenMemory); check makes it.
	seen *tokenMemory
}

// tokenMemory remembers verified tokens (by SHA-256) until they expire: one request authenticates up to
// three times (the idempotency guard, its credential, the route) and LibreChat reuses a token for up to
// 30 s, while one EdDSA check costs ~0.1 ms (BenchmarkClientJWTVerify).
type tokenMemory struct {
	mu sync.Mutex
	m  map[[32]byte]ClientKey
}

// maxSeenTokens bounds the memory (a few hundred bytes a token).
const maxSeenTokens = 4096

// check validates the configuration and fills in its defaults.
func (c *ClientJWT) check() error {
	if c.Issuer == "" {
		c.Issuer = DefaultClientJWTIssuer
	}
	if c.Audience == "" {
		c.Audience = DefaultClientJWTAudience
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.seen == nil {
		c.seen = &tokenMemory{m: map[[32]byte]ClientKey{}}
	}
	if len(c.Keys) == 0 {
		return errors.New("signed client tokens need at least one public key")
	}
	for kid, k := range c.Keys {
		if kid == "" {
			return errors.New("a client token key has no kid")
		}
		if _, err := jwtAlgOf(k); err != nil {
			return fmt.Errorf("client token key %q: %v", kid, err)
		}
	}
	return nil
}

// jwtAlgOf is the JWS algorithm a public key verifies.
func jwtAlgOf(k crypto.PublicKey) (string, error) {
	switch k := k.(type) {
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return "", errors.New("an Ed25519 key is 32 bytes")
		}
		return "EdDSA", nil
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return "", errors.New("an RSA key needs at least 2048 bits")
		}
		return "RS256", nil
	}
	return "", fmt.Errorf("%T keys are not supported: use Ed25519 (EdDSA) or RSA (RS256)", k)
}

// jwtError is why a bearer token was refused (401; the reason is the Code API's reason code).
type jwtError struct{ reason, msg string }

func (e *jwtError) Error() string { return e.msg }

func jwtFail(reason, msg string) error { return &jwtError{reason: reason, msg: msg} }

// looksLikeJWT reports whether a bearer token is a compact JWS with an alg (so that a hub without signed
// tokens can say so instead of "invalid key").
func looksLikeJWT(tok string) bool {
	seg, _, ok := strings.Cut(tok, ".")
	if !ok || strings.Count(tok, ".") != 2 || len(tok) > maxJWTBytes {
		return false
	}
	var h struct {
		Alg string `json:"alg"`
	}
	b, err := base64.RawURLEncoding.DecodeString(seg)
	return err == nil && json.Unmarshal(b, &h) == nil && h.Alg != ""
}

// verify returns the identity a token grants: from memory when it was verified before and has not
// expired since, else by checking it (verifyToken).
func (c *ClientJWT) verify(tok string) (*ClientKey, error) {
	sum := sha256.Sum256([]byte(tok))
	now := c.now()
	c.seen.mu.Lock()
	k, ok := c.seen.m[sum]
	c.seen.mu.Unlock()
	if ok && now.Before(k.until) {
		return &k, nil
	}
	fresh, err := c.verifyToken(tok)
	if err != nil {
		return nil, err
	}
	c.seen.mu.Lock()
	defer c.seen.mu.Unlock()
	if len(c.seen.m) >= maxSeenTokens {
		for h, k := range c.seen.m {
			if !now.Before(k.until) {
				delete(c.seen.m, h)
			}
		}
		if len(c.seen.m) >= maxSeenTokens {
			clear(c.seen.m)
		}
	}
	c.seen.m[sum] = *fresh
	return fresh, nil
}

// verifyToken checks a token's header and signature, then its claims, and returns the identity it grants.
func (c *ClientJWT) verifyToken(tok string) (*ClientKey, error) {
	if len(tok) > maxJWTBytes {
		return nil, jwtFail("malformed", "JWT is larger than 16 KiB")
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, jwtFail("malformed", "JWT must have three segments")
	}
	var hdr struct {
		Alg string  `json:"alg"`
		Typ *string `json:"typ"`
		Kid string  `json:"kid"`
	}
	if err := jwtSegment(parts[0], &hdr, "JWT header"); err != nil {
		return nil, err
	}
	claims := map[string]json.RawMessage{}
	if err := jwtSegment(parts[1], &claims, "JWT payload"); err != nil {
		return nil, err
	}
	if hdr.Alg != "EdDSA" && hdr.Alg != "RS256" {
		return nil, jwtFail("wrong_alg", "JWT alg "+quoteClaim(hdr.Alg)+" is not supported: use EdDSA or RS256")
	}
	if hdr.Typ != nil && *hdr.Typ != "JWT" {
		return nil, jwtFail("malformed", "JWT typ must be JWT")
	}
	if hdr.Kid == "" {
		return nil, jwtFail("malformed_claims", "kid is required")
	}
	key, ok := c.Keys[hdr.Kid]
	if !ok {
		return nil, jwtFail("unknown_kid", "JWT kid "+quoteClaim(hdr.Kid)+" is not configured on this hub")
	}
	if alg, _ := jwtAlgOf(key); alg != hdr.Alg {
		return nil, jwtFail("wrong_alg", "JWT alg "+hdr.Alg+" does not match the "+alg+" key of kid "+quoteClaim(hdr.Kid))
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !jwtSignatureOK(key, parts[0]+"."+parts[1], sig) {
		return nil, jwtFail("bad_signature", "JWT signature is invalid")
	}
	return c.principal(claims)
}

func jwtSegment(seg string, v any, label string) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return jwtFail("malformed", label+" is not valid base64url")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return jwtFail("malformed", label+" is not a JSON object")
	}
	return nil
}

func jwtSignatureOK(key crypto.PublicKey, input string, sig []byte) bool {
	switch k := key.(type) {
	case ed25519.PublicKey:
		return ed25519.Verify(k, []byte(input), sig)
	case *rsa.PublicKey:
		sum := sha256.Sum256([]byte(input))
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], sig) == nil
	}
	return false
}

// principal validates the claims (the Code API's validateClaims) and maps them to a client identity:
// tenant_id is the tenant, sub the user, role the one role; code_worker_id is the worker the token pins.
func (c *ClientJWT) principal(claims map[string]json.RawMessage) (*ClientKey, error) {
	cl := claimReader{claims: claims}
	iss, sub, jti := cl.str("iss", true), cl.str("sub", true), cl.str("jti", true)
	tenant := cl.str("tenant_id", false)
	iat, nbf, exp := cl.num("iat"), cl.num("nbf"), cl.num("exp")
	source, role := cl.str("principal_source", true), cl.str("role", false)
	cl.str("auth_context_hash", true)
	workerID := cl.str("code_worker_id", false)
	if cl.err != nil {
		return nil, cl.err
	}
	now := float64(c.now().Unix())
	skew, life := jwtClockSkew.Seconds(), jwtMaxLifetime.Seconds()
	switch {
	case source != "librechat_jwt" && source != "openid_reuse":
		return nil, jwtFail("malformed_claims", "principal_source "+quoteClaim(source)+" is not accepted")
	case len(jti) > 256:
		return nil, jwtFail("malformed_claims", "jti is too long")
	case iss != c.Issuer:
		return nil, jwtFail("wrong_issuer", "JWT issuer "+quoteClaim(iss)+" is not trusted (this hub accepts "+quoteClaim(c.Issuer)+")")
	}
	if err := checkAudience(claims["aud"], c.Audience); err != nil {
		return nil, err
	}
	switch {
	case exp <= now-skew:
		return nil, jwtFail("expired", "JWT is expired; mint a new one")
	case nbf > now+skew:
		return nil, jwtFail("not_yet_valid", "JWT is not yet valid (nbf is in the future; check the clocks)")
	case iat > now+skew:
		return nil, jwtFail("future_iat", "JWT iat is in the future (check the clocks)")
	case exp <= iat:
		return nil, jwtFail("malformed_claims", "JWT exp must be after iat")
	case exp-iat > life:
		return nil, jwtFail("ttl_too_long", "JWT lifetime exceeds 300 s")
	}
	if tenant == "" {
		tenant = jwtDefaultTenant
	}
	if !bridge.ValidWorkerID(tenant) {
		return nil, jwtFail("malformed_claims", "tenant_id "+quoteClaim(tenant)+" is not a valid tenant ID ([A-Za-z0-9][A-Za-z0-9._:-]{0,127})")
	}
	k := &ClientKey{Key: "jwt:" + tenant + ":" + sub, TenantID: tenant, UserID: sub, CodeWorkerID: workerID, signed: true,
		until: time.Unix(int64(exp), 0).Add(jwtClockSkew)}
	if role != "" {
		k.Roles = []string{role}
	}
	return k, nil
}

// claimReader reads typed claims, keeping the first error.
type claimReader struct {
	claims map[string]json.RawMessage
	err    error
}

// str reads a string claim: a required one must be a non-blank string, an optional one absent or so.
func (r *claimReader) str(name string, required bool) string {
	raw, ok := r.claims[name]
	if r.err != nil || (!ok && !required) {
		return ""
	}
	var s string
	if !ok || json.Unmarshal(raw, &s) != nil || strings.TrimSpace(s) == "" {
		what := " is required"
		if ok {
			what = " must be a non-empty string"
		}
		r.err = jwtFail("malformed_claims", name+what)
	}
	return s
}

// num reads a NumericDate claim.
func (r *claimReader) num(name string) float64 {
	var f float64
	if r.err != nil {
		return 0
	}
	raw, ok := r.claims[name]
	if !ok || json.Unmarshal(raw, &f) != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		r.err = jwtFail("malformed_claims", name+" must be a number")
	}
	return f
}

// checkAudience accepts aud as the audience or an array of strings that contains it.
func checkAudience(raw json.RawMessage, want string) error {
	var one string
	if json.Unmarshal(raw, &one) == nil && strings.TrimSpace(one) != "" {
		if one != want {
			return jwtFail("wrong_audience", "JWT audience "+quoteClaim(one)+" is not accepted (this hub is "+quoteClaim(want)+")")
		}
		return nil
	}
	var many []any
	if json.Unmarshal(raw, &many) != nil || len(many) == 0 {
		return jwtFail("malformed_claims", "aud is required")
	}
	found := false
	for _, a := range many {
		s, ok := a.(string)
		if !ok {
			return jwtFail("malformed_claims", "aud must contain only strings")
		}
		found = found || s == want
	}
	if !found {
		return jwtFail("wrong_audience", "JWT audience is not accepted (this hub is "+quoteClaim(want)+")")
	}
	return nil
}

// quoteClaim quotes a caller's value for a message, cut short.
func quoteClaim(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// ParseClientJWTKeys reads the verification keys as the Code API does: a JWKS document ({"keys":[…]},
// each with its kid) and/or one public key (PEM SPKI or a JWK) under kid.
func ParseClientJWTKeys(jwks, publicKey, kid string) (map[string]crypto.PublicKey, error) {
	keys := map[string]crypto.PublicKey{}
	if strings.TrimSpace(jwks) != "" {
		var doc struct {
			Keys []json.RawMessage `json:"keys"`
		}
		if err := json.Unmarshal([]byte(jwks), &doc); err != nil || doc.Keys == nil {
			return nil, errors.New(`the JWKS must be a JSON object {"keys":[…]}`)
		}
		for i, raw := range doc.Keys {
			k, id, err := parseJWK(raw)
			if err == nil && id == "" {
				err = errors.New("it has no kid")
			}
			if err != nil {
				return nil, fmt.Errorf("JWKS key %d: %v", i, err)
			}
			keys[id] = k
		}
	}
	if strings.TrimSpace(publicKey) != "" {
		if kid == "" {
			kid = DefaultClientJWTKID
		}
		k, err := parsePublicKey(publicKey)
		if err != nil {
			return nil, fmt.Errorf("client token public key: %v", err)
		}
		keys[kid] = k
	}
	return keys, nil
}

// parsePublicKey reads a PEM SPKI public key or a JWK (escaped "\n" allowed, as env files carry them).
func parsePublicKey(s string) (crypto.PublicKey, error) {
	s = strings.TrimSpace(strings.ReplaceAll(s, `\n`, "\n"))
	if strings.HasPrefix(s, "{") {
		k, _, err := parseJWK([]byte(s))
		return k, err
	}
	block, _ := pem.Decode([]byte(s))
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM \"PUBLIC KEY\" block or a JWK")
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	_, err = jwtAlgOf(k)
	return k, err
}

// parseJWK reads an Ed25519 (kty OKP) or RSA public JWK and its kid.
func parseJWK(raw []byte) (crypto.PublicKey, string, error) {
	var j struct {
		Kty, Crv, X, N, E, Kid, Alg string
		D                           string `json:"d"`
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, "", errors.New("not a JSON object")
	}
	if j.D != "" {
		return nil, "", errors.New("it is a private key; give the public key only")
	}
	b64 := base64.RawURLEncoding
	var k crypto.PublicKey
	switch {
	case j.Kty == "OKP" && j.Crv == "Ed25519":
		x, err := b64.DecodeString(j.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, "", errors.New("x must be 32 bytes of base64url")
		}
		k = ed25519.PublicKey(x)
	case j.Kty == "RSA":
		n, err1 := b64.DecodeString(j.N)
		e, err2 := b64.DecodeString(j.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return nil, "", errors.New("n and e must be base64url")
		}
		k = &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
	default:
		return nil, "", fmt.Errorf("kty %q (crv %q) is not supported: use OKP/Ed25519 or RSA", j.Kty, j.Crv)
	}
	alg, err := jwtAlgOf(k)
	if err == nil && j.Alg != "" && j.Alg != alg {
		err = fmt.Errorf("alg %q does not fit the key (%s)", j.Alg, alg)
	}
	return k, j.Kid, err
}

// signedBearer authenticates a bearer token that is no static key's as a signed token. A refusal comes
// with why; (nil, "") means it is no signed token at all.
func (h *Hub) signedBearer(tok string) (*ClientKey, string) {
	if h.cfg.ClientJWT == nil {
		if looksLikeJWT(tok) {
			return nil, "Signed bearer tokens are not enabled on this hub (set CODELLM_HUB_CLIENT_JWT_PUBLIC_KEY or _JWKS); use an API key"
		}
		return nil, ""
	}
	k, err := h.cfg.ClientJWT.verify(tok)
	if err != nil {
		return nil, "Invalid bearer token: " + err.Error()
	}
	return k, ""
}
