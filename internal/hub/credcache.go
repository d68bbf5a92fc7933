package hub

import (
	"context"
	"crypto/ed25519"
	"errors"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/store"
)

// credCache holds the worker credentials this replica looked up, with their parsed public keys, by worker
// and credential hash. The routes whose store operation confirms the credential on the worker record its
// own transaction reads (register, lease, ack and settle: store.Auth.Confirm) verify the signature with a
// cached entry instead of reading the credential first — one store command less per worker request, four
// per assignment. An entry can only spare that read: a revoked, rotated, re-paired or expired credential
// still fails the operation's confirmation (401 CREDENTIAL_INVALID, nothing written), and the entry is
// dropped then. Every other route reads the credential afresh.
type credCache struct {
	mu sync.Mutex
	m  map[credCacheKey]*cachedCredential
}

type credCacheKey struct{ workerID, credHash string }

type cachedCredential struct {
	cred *store.Credential
	pub  ed25519.PublicKey
}

// maxCachedCredentials bounds the cache (a worker has one credential, two while it rotates); when full
// it starts over, which costs one read per worker.
const maxCachedCredentials = 1 << 16

// confirmedInStore are the worker routes whose store operation confirms the credential itself.
var confirmedInStore = map[string]bool{"register": true, "lease": true, "ack": true, "settle": true}

func (c *credCache) get(workerID, credHash string, now time.Time) *cachedCredential {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[credCacheKey{workerID, credHash}]
	if e == nil || !now.Before(e.cred.ExpiresAt) {
		return nil
	}
	return e
}

func (c *credCache) put(workerID, credHash string, e *cachedCredential) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedCredentials {
		c.m = map[credCacheKey]*cachedCredential{}
	}
	c.m[credCacheKey{workerID, credHash}] = e
}

func (c *credCache) drop(workerID, credHash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, credCacheKey{workerID, credHash})
}

// workerCredential returns the credential a worker request presents and its public key: from the cache
// when useCache is set (the route confirms it in the store; fromCache then says whether it was there),
// else read from the store (and cached).
func (h *Hub) workerCredential(ctx context.Context, workerID, credHash string, useCache bool) (e *cachedCredential, fromCache bool, err error) {
	if useCache {
		if e := h.creds.get(workerID, credHash, time.Now()); e != nil {
			return e, true, nil
		}
	}
	cred, err := h.credential(ctx, workerID, credHash)
	if err != nil {
		h.creds.drop(workerID, credHash)
		return nil, false, err
	}
	pub, err := bridge.ParsePublicKeyPEM(cred.PublicKey)
	if err != nil {
		return nil, false, bridge.ErrProofInvalid
	}
	e = &cachedCredential{cred: cred, pub: pub}
	h.creds.put(workerID, credHash, e)
	return e, false, nil
}

// replayOrReset refines a nonce refused as replayed when the credential came from the cache: a store that
// lost its data forgot the nonces with the credentials, so a request dated before the loss reads as a
// replay, where a fresh lookup names the loss (STORE_RESET) as it did before the cache.
func (h *Hub) replayOrReset(ctx context.Context, workerID, credHash string, err error) error {
	if !errors.Is(err, bridge.ErrProofReplayed) {
		return err
	}
	if _, _, cerr := h.workerCredential(ctx, workerID, credHash, false); cerr != nil {
		return cerr
	}
	return err
}

// credentialRefused is what a worker route answers when its store operation refused the credential: the
// cached entry is dropped, and a credential unknown because the store lost its data is STORE_RESET, as
// the up-front lookup answers (credential).
func (h *Hub) credentialRefused(ctx context.Context, workerID string, au *authenticated, err error) error {
	if !errors.Is(err, bridge.ErrCredentialInvalid) || au == nil {
		return err
	}
	h.creds.drop(workerID, au.auth.CredentialHash)
	if h.storeWasReset(ctx) {
		return bridge.ErrStoreReset
	}
	return err
}
