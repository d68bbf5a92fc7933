package bridge

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Keys are pure Ed25519 (no prehash). The public key travels as SPKI PEM and
// the private key is stored as PKCS#8 PEM, both newline-terminated (§4.1).

// ErrKeyInvalid is wrapped by every key parsing failure.
var ErrKeyInvalid = errors.New("bridge: invalid Ed25519 key")

// MaxPublicKeyLen bounds the publicKey field of a redemption.
const MaxPublicKeyLen = 4096

// GenerateKey makes a fresh worker key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(nil)
}

// MarshalPublicKeyPEM renders an SPKI "PUBLIC KEY" block.
func MarshalPublicKeyPEM(pub ed25519.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// MarshalPrivateKeyPEM renders a PKCS#8 "PRIVATE KEY" block.
func MarshalPrivateKeyPEM(priv ed25519.PrivateKey) (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// ParsePublicKeyPEM accepts only an SPKI PEM whose algorithm is Ed25519.
func ParsePublicKeyPEM(s string) (ed25519.PublicKey, error) {
	if len(s) > MaxPublicKeyLen {
		return nil, errors.Join(ErrKeyInvalid, errors.New("public key too long"))
	}
	block, rest := pem.Decode([]byte(s))
	if block == nil || block.Type != "PUBLIC KEY" || strings.TrimSpace(string(rest)) != "" {
		return nil, errors.Join(ErrKeyInvalid, errors.New("not a PUBLIC KEY PEM block"))
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, errors.Join(ErrKeyInvalid, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, errors.Join(ErrKeyInvalid, errors.New("public key is not Ed25519"))
	}
	return pub, nil
}

// ParsePrivateKeyPEM accepts only a PKCS#8 PEM holding an Ed25519 key.
func ParsePrivateKeyPEM(s string) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode([]byte(s))
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.Join(ErrKeyInvalid, errors.New("not a PRIVATE KEY PEM block"))
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.Join(ErrKeyInvalid, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.Join(ErrKeyInvalid, errors.New("private key is not Ed25519"))
	}
	return priv, nil
}

// SigningString builds S of §4.2: method, raw path, timestamp, nonce, body
// digest and credential joined by "\n". canonicalBody must already be the
// canonical form (§4.3).
func SigningString(method, path, timestamp, nonce string, canonicalBody []byte, credential string) string {
	return strings.Join([]string{
		strings.ToUpper(method), path, timestamp, nonce, SHA256Hex(canonicalBody), credential,
	}, "\n")
}

// Sign returns the unpadded base64url signature of S.
func Sign(priv ed25519.PrivateKey, s string) string {
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(s)))
}

// Verify checks a base64url signature (padding optional) over S.
func Verify(pub ed25519.PublicKey, s, sig string) bool {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(sig, "="))
	if err != nil || len(raw) != ed25519.SignatureSize || len(pub) != ed25519.PublicKeySize {
		return false
	}
	return ed25519.Verify(pub, []byte(s), raw)
}

// Proof is the header material of one signed request.
type Proof struct {
	Credential string
	Timestamp  string
	Nonce      string
	Signature  string
}

// SignRequest computes the proof for one worker request. path is the request
// path as it will appear on the request line, including the base prefix
// (e.g. "/v1/bridge/workers/my%3Avm/lease"). Each call uses a fresh nonce.
func SignRequest(priv ed25519.PrivateKey, credential, method, path string, canonicalBody []byte, now time.Time) Proof {
	p := Proof{Credential: credential, Timestamp: FormatTime(now), Nonce: NewID()}
	p.Signature = Sign(priv, SigningString(method, path, p.Timestamp, p.Nonce, canonicalBody, credential))
	return p
}

// Apply sets the authentication headers of a signed request.
func (p Proof) Apply(h http.Header) {
	h.Set("Authorization", "Bridge "+p.Credential)
	h.Set(HeaderTimestamp, p.Timestamp)
	h.Set(HeaderNonce, p.Nonce)
	h.Set(HeaderSignature, p.Signature)
	h.Set("Content-Type", "application/json")
}

// ProofFromHeaders extracts the proof of a received request. ok is false
// when a header is missing or the Authorization scheme is not "Bridge".
func ProofFromHeaders(h http.Header) (p Proof, ok bool) {
	scheme, cred, found := strings.Cut(strings.TrimSpace(h.Get("Authorization")), " ")
	if !found || !strings.EqualFold(scheme, "Bridge") {
		return Proof{}, false
	}
	p = Proof{
		Credential: strings.TrimSpace(cred),
		Timestamp:  h.Get(HeaderTimestamp),
		Nonce:      h.Get(HeaderNonce),
		Signature:  h.Get(HeaderSignature),
	}
	ok = p.Credential != "" && p.Timestamp != "" && p.Nonce != "" && p.Signature != ""
	return p, ok
}

// RequestPath returns the raw path of a received request as it appeared on
// the request line (r.RequestURI up to '?'), which is what the worker signed.
func RequestPath(r *http.Request) string {
	p := r.RequestURI
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if p == "" {
		p = r.URL.EscapedPath()
	}
	return p
}
