// Package seal is trip2g's sealed-secret format and the opening of a delivery bag's sealed fields.
//
// A role note keeps a credential in its frontmatter as a sealed blob and lists the field in the bag's
// `unseal` array; codellm opens the blob with a key from its OWN environment (SEAL_KEY) and hands the
// plaintext to the blocks as `bag.secrets.<field>` — never in the HTTP request, never in the blocks'
// environment. The format is byte-compatible with trip2g's codellm, so blobs sealed by either open in the
// other:
//
//	"sealed:v1:" + base64.StdEncoding(nonce ‖ AES-256-GCM(key, nonce, plaintext, no additional data))
//
// where key is the 32 bytes of the key variable's value taken verbatim (not hex, not derived) and nonce is
// 12 random bytes. The "v1" tag names the format so it can change without invalidating vaults.
//
// Errors are deliberately uninformative about the key: they name the field, never the variable's length,
// existence or value, so a note author cannot probe codellm's environment through them.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Prefix tags a frontmatter value as a sealed blob and carries the format version.
const Prefix = "sealed:v1:"

// DefaultKeyEnv is the environment variable holding the key unless a bag names another (unseal_env_key).
const DefaultKeyEnv = "SEAL_KEY"

// KeySize is the key length: AES-256.
const KeySize = 32

// ErrKeySize: the key is not exactly KeySize bytes. Only Seal and Open return it; Unseal hides it.
var ErrKeySize = fmt.Errorf("seal key must be exactly %d bytes", KeySize)

// ErrNotSealed: the value does not start with Prefix or is not valid base64 after it.
var ErrNotSealed = errors.New("value is not a " + Prefix + " blob")

// ErrOpen: authentication failed (wrong key, or the blob was altered or truncated).
var ErrOpen = errors.New("blob cannot be opened with this key")

func newAEAD(key string) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, ErrKeySize
	}
	block, err := aes.NewCipher([]byte(key))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal encrypts plaintext under key with a fresh random nonce and returns the tagged blob.
func Seal(key, plaintext string) (string, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	raw := aead.Seal(nonce, nonce, []byte(plaintext), nil)
	return Prefix + base64.StdEncoding.EncodeToString(raw), nil
}

// Open decrypts a blob made by Seal (or by trip2g's codellm) with key.
func Open(key, blob string) (string, error) {
	body, ok := strings.CutPrefix(blob, Prefix)
	if !ok {
		return "", ErrNotSealed
	}
	raw, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		return "", ErrNotSealed
	}
	aead, err := newAEAD(key)
	if err != nil {
		return "", err
	}
	if len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", ErrOpen
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, raw[:n], raw[n:], nil)
	if err != nil {
		return "", ErrOpen
	}
	return string(plain), nil
}
