package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// testKey is the key trip2g's own unseal tests use.
const testKey = "12345678901234567890123456789012"

// trip2gBlob was sealed outside Go, with Python's `cryptography` AESGCM, the way trip2g's
// internal/dataencryption builds one: nonce 00..0b, key testKey taken as raw bytes, no additional data,
// nonce‖ciphertext‖tag in standard base64 behind "sealed:v1:". Plaintext "krisp-token-value".
const trip2gBlob = "sealed:v1:AAECAwQFBgcICQoLMyYOaQUm7gXN5V8e5J4aNz2EGNof5mDFKyB/eozgGzKT"

func TestOpenBlobSealedByTrip2gConstruction(t *testing.T) {
	got, err := Open(testKey, trip2gBlob)
	if err != nil || got != "krisp-token-value" {
		t.Fatalf("Open = %q, %v", got, err)
	}
}

// openLikeTrip2g is trip2g's DecryptData spelled out from the format, independent of Open.
func openLikeTrip2g(t *testing.T, key, blob string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(blob, "sealed:v1:"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher([]byte(key))
	gcm, _ := cipher.NewGCM(block)
	plain, err := gcm.Open(nil, raw[:12], raw[12:], nil)
	if err != nil {
		t.Fatalf("trip2g's construction cannot open our blob: %v", err)
	}
	return string(plain)
}

func TestSealOpensTheTrip2gWay(t *testing.T) {
	blob, err := Seal(testKey, "s3cret\nline2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(blob, Prefix) {
		t.Fatalf("blob %q lacks %s", blob, Prefix)
	}
	if got := openLikeTrip2g(t, testKey, blob); got != "s3cret\nline2" {
		t.Fatalf("got %q", got)
	}
	if got, err := Open(testKey, blob); err != nil || got != "s3cret\nline2" {
		t.Fatalf("round trip: %q %v", got, err)
	}
}

func TestSealIsNotDeterministic(t *testing.T) {
	a, _ := Seal(testKey, "same")
	b, _ := Seal(testKey, "same")
	if a == b {
		t.Fatal("two seals of one plaintext are equal: the nonce is not fresh")
	}
}

func TestOpenRejects(t *testing.T) {
	blob, _ := Seal(testKey, "v")
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(blob, Prefix))
	raw[len(raw)-1] ^= 1
	tampered := Prefix + base64.StdEncoding.EncodeToString(raw)
	for _, tc := range []struct {
		name, key, blob string
		want            error
	}{
		{"wrong key", "00000000000000000000000000000000", blob, ErrOpen},
		{"tampered", testKey, tampered, ErrOpen},
		{"truncated", testKey, Prefix + "AAEC", ErrOpen},
		{"untagged", testKey, strings.TrimPrefix(blob, Prefix), ErrNotSealed},
		{"not base64", testKey, Prefix + "!!!", ErrNotSealed},
		{"short key", "short", blob, ErrKeySize},
		{"empty key", "", blob, ErrKeySize},
	} {
		if _, err := Open(tc.key, tc.blob); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := Seal("too-short", "x"); !errors.Is(err, ErrKeySize) {
		t.Errorf("Seal with a short key: %v", err)
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func bag(t *testing.T, v map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUnsealOpensDeclaredFields(t *testing.T) {
	in := []byte(`{"frontmatter":{"krisp_token":"` + trip2gBlob + `","krisp_base_url":"https://api.krisp.ai"},` +
		`"unseal":["krisp_token"],"depth":1,"big":12345678901234567890,"future_field":"keep me"}`)
	out, opened, err := Unseal(in, env(map[string]string{"SEAL_KEY": testKey}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(opened) != 1 || opened[0] != "krisp-token-value" {
		t.Fatalf("opened = %q", opened)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if string(got["secrets"]) != `{"krisp_token":"krisp-token-value"}` {
		t.Errorf("secrets = %s", got["secrets"])
	}
	if !strings.Contains(string(got["frontmatter"]), trip2gBlob) {
		t.Errorf("the ciphertext must stay in the frontmatter: %s", got["frontmatter"])
	}
	// Values the bag carries survive byte for byte, including a number float64 would round.
	for k, want := range map[string]string{"depth": "1", "big": "12345678901234567890", "future_field": `"keep me"`} {
		if string(got[k]) != want {
			t.Errorf("%s = %s, want %s", k, got[k], want)
		}
	}
}

func TestUnsealNoDeclarationIsANoOp(t *testing.T) {
	for _, in := range []string{`{"frontmatter":{"a":"b"}}`, `{"unseal":[]}`, `{"unseal":null}`, `[1,2]`, `"text"`, ``} {
		out, opened, err := Unseal([]byte(in), env(nil), nil)
		if err != nil || len(opened) != 0 || string(out) != in {
			t.Errorf("%s: out=%s opened=%v err=%v", in, out, opened, err)
		}
	}
}

func TestUnsealFailures(t *testing.T) {
	blob, _ := Seal(testKey, "v")
	keyed := env(map[string]string{"SEAL_KEY": testKey})
	for _, tc := range []struct {
		name  string
		bag   map[string]any
		env   func(string) string
		field string
		want  string
	}{
		{"missing field", map[string]any{"frontmatter": map[string]any{}, "unseal": []string{"absent"}}, keyed,
			"absent", `"absent" is not in the frontmatter`},
		{"no frontmatter", map[string]any{"unseal": []string{"tok"}}, keyed, "tok", `"tok" is not in the frontmatter`},
		{"not a string", map[string]any{"frontmatter": map[string]any{"tok": 5}, "unseal": []string{"tok"}}, keyed,
			"tok", `"tok" is not in the frontmatter`},
		{"plaintext in frontmatter", map[string]any{"frontmatter": map[string]any{"tok": "plain"}, "unseal": []string{"tok"}},
			keyed, "tok", "not a sealed:v1: blob"},
		{"no key", map[string]any{"frontmatter": map[string]any{"tok": blob}, "unseal": []string{"tok"}}, env(nil),
			"tok", `unseal failed for "tok"`},
		{"short key", map[string]any{"frontmatter": map[string]any{"tok": blob}, "unseal": []string{"tok"}},
			env(map[string]string{"SEAL_KEY": "short"}), "tok", `unseal failed for "tok"`},
		{"wrong key", map[string]any{"frontmatter": map[string]any{"tok": blob}, "unseal": []string{"tok"}},
			env(map[string]string{"SEAL_KEY": strings.Repeat("x", 32)}), "tok", `unseal failed for "tok"`},
		{"second field fails", map[string]any{"frontmatter": map[string]any{"tok": blob}, "unseal": []string{"tok", "other"}},
			keyed, "other", `"other" is not in the frontmatter`},
		{"unseal not a list", map[string]any{"frontmatter": map[string]any{"tok": blob}, "unseal": "tok"}, keyed,
			"", `"unseal" must be a list`},
		{"foreign key variable", map[string]any{"frontmatter": map[string]any{"tok": blob}, "unseal": []string{"tok"},
			"unseal_env_key": "CODELLM_API_KEY"}, keyed, "", `"unseal_env_key" must be SEAL_KEY`},
	} {
		_, _, err := Unseal(bag(t, tc.bag), tc.env, nil)
		var se *Error
		if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(se.Error(), tc.want) {
			t.Errorf("%s: err = %v, want field %q and %q", tc.name, err, tc.field, tc.want)
			continue
		}
		// Nothing about the key material: not its length, not its value, not the variable's name.
		for _, leak := range []string{"32", "bytes", "short", "SEAL_KEY="} {
			if tc.name != "foreign key variable" && strings.Contains(se.Error(), leak) {
				t.Errorf("%s: error %q leaks %q", tc.name, se.Error(), leak)
			}
		}
	}
}

func TestUnsealCustomKeyEnv(t *testing.T) {
	in := bag(t, map[string]any{"frontmatter": map[string]any{"tok": trip2gBlob}, "unseal": []string{"tok"},
		"unseal_env_key": "SEAL_KEY_V2"})
	_, opened, err := Unseal(in, env(map[string]string{"SEAL_KEY_V2": testKey}), nil)
	if err != nil || len(opened) != 1 || opened[0] != "krisp-token-value" {
		t.Fatalf("opened=%q err=%v", opened, err)
	}
}

// Differential: the same bag opens when the key is codellm's alone and is refused once the key variable
// is also handed to the blocks.
func TestUnsealRefusesAKeyExposedToCode(t *testing.T) {
	in := bag(t, map[string]any{"frontmatter": map[string]any{"tok": trip2gBlob}, "unseal": []string{"tok"}})
	keyed := env(map[string]string{"SEAL_KEY": testKey})
	if _, _, err := Unseal(in, keyed, func(string) bool { return false }); err != nil {
		t.Fatalf("unexposed key: %v", err)
	}
	_, _, err := Unseal(in, keyed, func(n string) bool { return n == "SEAL_KEY" })
	if err == nil || !strings.Contains(err.Error(), "exposed to code") {
		t.Fatalf("exposed key: err = %v", err)
	}
}

func TestCoversKey(t *testing.T) {
	for _, tc := range []struct {
		names, prefixes []string
		want            bool
	}{
		{nil, nil, false},
		{[]string{"KRISP_TOKEN"}, []string{"KRISP_"}, false},
		{[]string{"SEAL_KEY"}, nil, true},
		{[]string{"SEAL_KEY_V2"}, nil, true},
		{nil, []string{"SEAL"}, true},
		{nil, []string{"S"}, true},
		{nil, []string{"SEAL_KEY_"}, true},
		{nil, []string{"SEALS"}, false},
	} {
		if _, got := CoversKey(tc.names, tc.prefixes); got != tc.want {
			t.Errorf("CoversKey(%v, %v) = %v", tc.names, tc.prefixes, got)
		}
	}
}

func TestRedact(t *testing.T) {
	in := `parse stdout: (got: "{\"tok\": \"s3cret\"}")`
	if got := Redact(in, []string{"s3cret"}); strings.Contains(got, "s3cret") || !strings.Contains(got, Redacted) {
		t.Errorf("Redact = %q", got)
	}
	if Redact(in, nil) != in || Redact(in, []string{""}) != in {
		t.Error("an empty secret list or an empty secret must not change the text")
	}
	if got := string(RedactBytes([]byte("a s3cret b"), []string{"s3cret"})); got != "a [redacted] b" {
		t.Errorf("RedactBytes = %q", got)
	}
}
