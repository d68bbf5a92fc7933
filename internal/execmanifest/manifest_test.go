package execmanifest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// golden is testdata/golden.json: a body and its manifest signed by Node (gen_golden.mjs), so the
// canonical bytes, the key sort and the body hash are checked against JavaScript's own, not against
// codellm's idea of them.
type golden struct {
	KeyDER     string          `json:"public_key_base64_der"`
	KeyPEM     string          `json:"public_key_pem"`
	Now        int64           `json:"now"`
	Body       json.RawMessage `json:"body"`
	BodySHA256 string          `json:"body_sha256"`
	Payload    string          `json:"payload"`
	Token      string          `json:"token"`
}

func loadGolden(t testing.TB) (golden, ed25519.PublicKey, *bridge.Object) {
	t.Helper()
	raw, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	key, err := ParsePublicKey(g.KeyDER)
	if err != nil {
		t.Fatal(err)
	}
	body, err := bridge.ParseObject(g.Body)
	if err != nil {
		t.Fatal(err)
	}
	return g, key, body
}

func TestGoldenManifestSignedByNodeVerifies(t *testing.T) {
	g, key, body := loadGolden(t)
	for _, form := range []string{g.KeyDER, g.KeyPEM, strings.ReplaceAll(g.KeyPEM, "\n", `\n`)} {
		k, err := ParsePublicKey(form)
		if err != nil || !k.Equal(key) {
			t.Fatalf("ParsePublicKey(%q) = %v, %v", form, k, err)
		}
	}
	sum, err := BodySHA256(body)
	if err != nil || sum != g.BodySHA256 {
		t.Fatalf("BodySHA256 = %q, %v; Node computed %q", sum, err, g.BodySHA256)
	}
	c, err := VerifyRequest(g.Token, key, body, time.Unix(g.Now, 0))
	if err != nil {
		t.Fatalf("VerifyRequest: %v", err)
	}
	if c.OutputSessionID != "sess-out" || c.MaxOutputFiles != 4 || c.MaxUploadBytes != 1<<20 || c.MaxRequests != 16 ||
		len(c.InputFiles) != 2 || c.TenantID != "tenant-a" || !c.Expires.Equal(time.Unix(1764900600, 0)) {
		t.Fatalf("claims = %+v", c)
	}
	canon, err := SortedCanonical(c.Raw)
	if err != nil || string(canon) != g.Payload {
		t.Fatalf("SortedCanonical(payload) = %s, %v; Node signed %s", canon, err, g.Payload)
	}
}

// The golden body's metadata has keys U+1F600 and U+FF61: JavaScript sorts them by UTF-16 code unit
// (0xD83D before 0xFF61), Go's byte order the other way round. Hashing in byte order must not match.
func TestBodyHashUsesJavaScriptKeyOrder(t *testing.T) {
	g, _, body := loadGolden(t)
	md, _ := body.Get("metadata")
	m := md.(*bridge.Object)
	byteOrder := slices.Clone(m.Members)
	slices.SortFunc(byteOrder, func(a, b bridge.Member) int { return strings.Compare(a.Key, b.Key) })
	if byteOrder[0].Key != "｡k" {
		t.Fatalf("fixture no longer distinguishes the orders: %v", byteOrder)
	}
	// Byte order, computed by hand: the hash differs from Node's.
	wrong := strings.Replace(mustCanon(t, body), `{"😀k":1,"｡k":2}`, `{"｡k":2,"😀k":1}`, 1)
	sum := sha256.Sum256([]byte(wrong))
	if base64.RawURLEncoding.EncodeToString(sum[:]) == g.BodySHA256 {
		t.Fatal("a byte-order canonical form hashes like the JavaScript one: the test cannot tell them apart")
	}
	if !strings.Contains(mustCanon(t, body), `{"😀k":1,"｡k":2}`) {
		t.Fatalf("canonical body does not use UTF-16 order: %s", mustCanon(t, body))
	}
}

func mustCanon(t *testing.T, v any) string {
	t.Helper()
	b, err := SortedCanonical(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A forged manifest (claims changed after signing, keeping the original signature) has a perfectly valid
// shape: without the signature check it would be trusted. With it, it is refused as invalid_signature.
func TestTamperedManifestRefusedOnlyBySignature(t *testing.T) {
	g, key, body := loadGolden(t)
	tampered := strings.Replace(g.Payload, `"max_upload_bytes":1048576`, `"max_upload_bytes":1073741824`, 1)
	parts := strings.Split(g.Token, ".")
	forged := base64.RawURLEncoding.EncodeToString([]byte(tampered)) + "." + parts[1]

	tree, err := bridge.ParseObject([]byte(tampered))
	if err != nil {
		t.Fatal(err)
	}
	if c, e := claimsOf(tree); e != nil || c.MaxUploadBytes != 1<<30 {
		t.Fatalf("the forged claims do not even parse (%v): the differential proves nothing", e)
	}
	if mustCanon(t, tree) != tampered {
		t.Fatal("the forged payload is not canonical: it would be refused for that, not for its signature")
	}
	_, err = VerifyRequest(forged, key, body, time.Unix(g.Now, 0))
	assertReason(t, err, ReasonInvalidSignature, 403)

	other, _, _ := ed25519.GenerateKey(rand.Reader)
	_, err = VerifyRequest(g.Token, other, body, time.Unix(g.Now, 0))
	assertReason(t, err, ReasonInvalidSignature, 403)
}

func assertReason(t *testing.T, err error, want Reason, status int) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is not an *Error (want %s)", err, want)
	}
	if e.Reason != want || e.Status() != status {
		t.Fatalf("refusal %s/%d %q, want %s/%d", e.Reason, e.Status(), e.Message, want, status)
	}
}

// fixture is a signed manifest for a body built in Go, for the refusal table.
type fixture struct {
	pub    ed25519.PublicKey
	priv   ed25519.PrivateKey
	now    time.Time
	body   *bridge.Object
	claims *bridge.Object
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body := parse(t, `{"language":"python","version":"*","files":[{"name":"main.py","content":"print(1)"},
		{"id":"o1","storage_session_id":"in","name":"a.txt"}],"session_id":"x","output_session_id":"out"}`)
	now := time.Unix(1_800_000_000, 0)
	claims := parse(t, `{"v":1,"exec_id":"e","tenant_id":"t","user_id":"u","session_key":"k",
		"input_files":[{"id":"o1","session_id":"in","name":"a.txt"}],"read_sessions":["in"],
		"output_session_id":"out","max_upload_bytes":100,"max_output_files":2,"max_requests":8,
		"iat":1800000000,"exp":1800000300}`)
	f := &fixture{pub: pub, priv: priv, now: now, body: body, claims: claims}
	f.rehash(t)
	return f
}

func parse(t *testing.T, s string) *bridge.Object {
	t.Helper()
	o, err := bridge.ParseObject([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (f *fixture) rehash(t *testing.T) {
	sum, err := BodySHA256(f.body)
	if err != nil {
		t.Fatal(err)
	}
	f.claims.Set("execute_body_sha256", sum)
}

func (f *fixture) token(t *testing.T) string {
	tok, err := Sign(f.claims, f.priv)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestVerifyRequestRefusals(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(t *testing.T, f *fixture) string // returns the token to verify
		reason Reason
		status int
	}{
		{"valid", func(t *testing.T, f *fixture) string { return f.token(t) }, "", 200},
		{"missing", func(*testing.T, *fixture) string { return "" }, ReasonMissingHeader, 401},
		{"no key", func(t *testing.T, f *fixture) string { f.pub = nil; return f.token(t) }, ReasonMissingKey, 500},
		{"three parts", func(t *testing.T, f *fixture) string { return f.token(t) + ".x" }, ReasonMalformed, 400},
		{"padded base64", func(t *testing.T, f *fixture) string {
			p := strings.Split(f.token(t), ".")
			return base64.URLEncoding.EncodeToString(mustDecode(t, p[0])) + "=." + p[1]
		}, ReasonMalformed, 400},
		{"not canonical", func(t *testing.T, f *fixture) string {
			payload := append([]byte(" "), []byte(mustCanon(t, f.claims))...)
			return base64.RawURLEncoding.EncodeToString(payload) + "." +
				base64.RawURLEncoding.EncodeToString(ed25519.Sign(f.priv, payload))
		}, ReasonMalformed, 400},
		{"not json", func(t *testing.T, f *fixture) string {
			return base64.RawURLEncoding.EncodeToString([]byte("{")) + ".AAAA"
		}, ReasonMalformed, 400},
		{"missing claim", func(t *testing.T, f *fixture) string { f.claims.Delete("tenant_id"); return f.token(t) }, ReasonMalformed, 400},
		{"version 2", func(t *testing.T, f *fixture) string { f.claims.Set("v", 2.0); return f.token(t) }, ReasonMalformed, 400},
		{"expired", func(t *testing.T, f *fixture) string { f.now = f.now.Add(331 * time.Second); return f.token(t) }, ReasonExpired, 403},
		{"within skew", func(t *testing.T, f *fixture) string { f.now = f.now.Add(329 * time.Second); return f.token(t) }, "", 200},
		{"not yet valid", func(t *testing.T, f *fixture) string { f.now = f.now.Add(-31 * time.Second); return f.token(t) }, ReasonNotYetValid, 403},
		{"other output session", func(t *testing.T, f *fixture) string {
			f.body.Set("output_session_id", "elsewhere")
			f.rehash(t)
			return f.token(t)
		}, ReasonScopeMismatch, 403},
		{"an input the manifest does not list", func(t *testing.T, f *fixture) string {
			v, _ := f.body.Get("files")
			f.body.Set("files", append(v.([]any), parse(t, `{"id":"o2","storage_session_id":"in","name":"b.txt"}`)))
			f.rehash(t)
			return f.token(t)
		}, ReasonScopeMismatch, 403},
		{"read sessions wider than the inputs", func(t *testing.T, f *fixture) string {
			f.claims.Set("read_sessions", []any{"in", "secret-session"})
			return f.token(t)
		}, ReasonScopeMismatch, 403},
		{"body changed after signing", func(t *testing.T, f *fixture) string {
			tok := f.token(t)
			f.body.Set("stdin", "injected")
			return tok
		}, ReasonScopeMismatch, 403},
		{"no body hash", func(t *testing.T, f *fixture) string {
			f.claims.Delete("execute_body_sha256")
			return f.token(t)
		}, ReasonScopeMismatch, 403},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tok := tc.mutate(t, f)
			_, err := VerifyRequest(tok, f.pub, f.body, f.now)
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("refused a valid manifest: %v", err)
				}
				return
			}
			assertReason(t, err, tc.reason, tc.status)
		})
	}
}

func mustDecode(t *testing.T, s string) []byte {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTokenPrefersTheBody(t *testing.T) {
	body := parse(t, `{"execution_manifest":"from-body"}`)
	if got := Token(body, "from-header"); got != "from-body" {
		t.Fatalf("Token = %q", got)
	}
	if got := Token(parse(t, `{"execution_manifest":""}`), "from-header"); got != "from-header" {
		t.Fatalf("Token = %q", got)
	}
}

func TestParsePublicKeyRefusesOtherKeys(t *testing.T) {
	rk, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	for in, want := range map[string]string{
		"":                                     "empty",
		"not base64!":                          "neither PEM nor base64",
		base64.StdEncoding.EncodeToString(der): "not Ed25519",
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})): `not a PEM "PUBLIC KEY"`,
	} {
		if _, err := ParsePublicKey(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParsePublicKey(%.20q) = %v, want an error containing %q", in, err, want)
		}
	}
}
