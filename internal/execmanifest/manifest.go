package execmanifest

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// Header is the request header that may carry the manifest when the body's "execution_manifest" member
// does not (the Code API sends large manifests in the body; the header is its fallback).
const Header = "X-CodeAPI-Execution-Manifest"

// Version is the only manifest version ("v") the Code API signs.
const Version = 1

// ClockTolerance is the skew allowed on both ends of a manifest's lifetime, the Code API's 30 seconds.
const ClockTolerance = 30 * time.Second

// Reason classifies a refusal, in the Code API's words (ExecutionManifestErrorReason).
type Reason string

const (
	ReasonMissingHeader    Reason = "missing_header"
	ReasonMissingKey       Reason = "missing_secret" // the verifier has no key: an operator error
	ReasonMalformed        Reason = "malformed"
	ReasonInvalidSignature Reason = "invalid_signature"
	ReasonExpired          Reason = "expired"
	ReasonNotYetValid      Reason = "not_yet_valid"
	ReasonScopeMismatch    Reason = "scope_mismatch"
)

// Error is a refused manifest. Message is the client-facing text (the Code API's sentence); Status the
// HTTP status its sandbox answers for Reason.
type Error struct {
	Reason  Reason
	Message string
}

func (e *Error) Error() string { return e.Message }

// Status is the HTTP status of the refusal, as the Code API's sandbox maps its reasons: a verifier
// without a key is the server's fault (500), a missing manifest unauthenticated (401), an undecodable
// one a bad request (400), and every other refusal forbidden (403).
func (e *Error) Status() int {
	switch e.Reason {
	case ReasonMissingKey:
		return http.StatusInternalServerError
	case ReasonMissingHeader:
		return http.StatusUnauthorized
	case ReasonMalformed:
		return http.StatusBadRequest
	}
	return http.StatusForbidden
}

func fail(r Reason, msg string) *Error { return &Error{Reason: r, Message: msg} }

// InputFile is one by-reference input a manifest authorises: object ID, its storage session and the name
// it is written under.
type InputFile struct {
	ID        string
	SessionID string
	Name      string
}

// Claims are a verified manifest's claims. Only the members codellm enforces are kept as fields; Raw is
// the whole payload tree.
type Claims struct {
	ExecID          string
	TenantID        string
	UserID          string
	SessionKey      string
	InputFiles      []InputFile
	ReadSessions    []string
	OutputSessionID string
	MaxUploadBytes  int64
	MaxOutputFiles  int
	MaxRequests     int
	IssuedAt        time.Time
	Expires         time.Time
	BodySHA256      string // execute_body_sha256 ("" when absent)
	Raw             *bridge.Object
}

// ParsePublicKey reads the verifier key as the Code API configures it: PEM (SPKI, "PUBLIC KEY"), or
// base64 of the SPKI DER, with literal "\n" sequences (an environment variable's escaped newlines) taken
// as newlines. Only an Ed25519 key is accepted.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	s = strings.ReplaceAll(strings.TrimSpace(s), `\n`, "\n")
	if s == "" {
		return nil, errors.New("the execution manifest public key is empty")
	}
	var der []byte
	if strings.Contains(s, "BEGIN ") {
		block, _ := pem.Decode([]byte(s))
		if block == nil || block.Type != "PUBLIC KEY" {
			return nil, errors.New(`the execution manifest public key is not a PEM "PUBLIC KEY" block`)
		}
		der = block.Bytes
	} else {
		var err error
		if der, err = base64.StdEncoding.DecodeString(s); err != nil {
			return nil, errors.New("the execution manifest public key is neither PEM nor base64 SPKI DER")
		}
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("the execution manifest public key is not an SPKI public key: %w", err)
	}
	pk, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("the execution manifest public key is a %T, not Ed25519", k)
	}
	return pk, nil
}

var base64URL = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func decodePart(s string) ([]byte, *Error) {
	if !base64URL.MatchString(s) || len(s)%4 == 1 {
		return nil, fail(ReasonMalformed, "Execution manifest is not valid base64url")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fail(ReasonMalformed, "Execution manifest is not valid base64url")
	}
	return b, nil
}

// Verify checks token's form, its Ed25519 signature under key and its lifetime at now, and returns its
// claims. It does not bind the manifest to a request: VerifyRequest does both.
func Verify(token string, key ed25519.PublicKey, now time.Time) (*Claims, error) {
	if len(key) != ed25519.PublicKeySize {
		return nil, fail(ReasonMissingKey, "Execution manifest public key is not configured")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return nil, fail(ReasonMalformed, "Execution manifest token is malformed")
	}
	payload, e := decodePart(parts[0])
	if e != nil {
		return nil, e
	}
	tree, err := bridge.ParseObject(payload)
	if err != nil {
		return nil, fail(ReasonMalformed, "Execution manifest payload is not valid JSON")
	}
	claims, e := claimsOf(tree)
	if e != nil {
		return nil, e
	}
	canon, err := SortedCanonical(tree)
	if err != nil || string(canon) != string(payload) {
		return nil, fail(ReasonMalformed, "Execution manifest payload is not canonical")
	}
	sig, e := decodePart(parts[1])
	if e != nil {
		return nil, e
	}
	if !ed25519.Verify(key, payload, sig) {
		return nil, fail(ReasonInvalidSignature, "Execution manifest signature is invalid")
	}
	if !claims.Expires.After(now.Add(-ClockTolerance)) {
		return nil, fail(ReasonExpired, "Execution manifest is expired")
	}
	if claims.IssuedAt.After(now.Add(ClockTolerance)) {
		return nil, fail(ReasonNotYetValid, "Execution manifest is not valid yet")
	}
	return claims, nil
}

// seconds turns a claim's Unix seconds (possibly fractional, as JSON numbers are) into a time.
func seconds(f float64) time.Time {
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// Sign mints a manifest for claims with priv, as the Code API's service worker does: the sorted canonical
// JSON of the claims, signed with Ed25519. codellm never signs in production (a worker only verifies);
// this is the signer of the stand-in Code API its tests drive the worker with.
func Sign(claims *bridge.Object, priv ed25519.PrivateKey) (string, error) {
	payload, err := SortedCanonical(claims)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(ed25519.Sign(priv, payload)), nil
}
