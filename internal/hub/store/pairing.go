package store

import (
	"context"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// clearPending forgets a pending pairing code.
func clearPending(rec *WorkerRecord) {
	rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = "", time.Time{}, nil, 0
}

// CreatePairing implements Store.
func (p *Protocol) CreatePairing(ctx context.Context, workerID, codeHash string, binding *bridge.Binding, expiresAt time.Time) error {
	return p.update(ctx, "create_pairing", workerID, func(t *wtx) error {
		rec := t.rec
		if rec.PendingCode != "" {
			t.tx.Delete(codeKey(rec.PendingCode))
		}
		rec.PendingCode, rec.PendingExpires, rec.PendingBinding, rec.PendingGen = codeHash, expiresAt, binding, rec.PairingGeneration
		t.recDirty = true
		if t.now.Before(expiresAt) {
			t.tx.Put(codeKey(codeHash), []byte(workerID), Durable, expiresAt)
		}
		return nil
	})
}

// RedeemPairing implements Store: a code is consumed whatever the outcome.
func (p *Protocol) RedeemPairing(ctx context.Context, rp RedeemParams) (string, error) {
	ck := codeKey(rp.CodeHash)
	vals, err := p.read(ctx, "redeem_pairing", ck)
	if err != nil {
		return "", err
	}
	owner := string(vals[0])
	if owner == "" {
		return "", bridge.ErrPairingInvalid
	}
	var identity string
	err = p.update(ctx, "redeem_pairing", owner, func(t *wtx) error {
		identity = ""
		cur, err := t.tx.Get(ck)
		if err != nil {
			return Abort(err)
		}
		if string(cur[0]) != owner {
			return bridge.ErrPairingInvalid
		}
		rec := t.rec
		burn := func(e error) error {
			if rec.PendingCode == rp.CodeHash {
				clearPending(rec)
				t.recDirty = true
			}
			t.tx.Delete(ck)
			return e
		}
		if rec.PendingCode != rp.CodeHash || !t.now.Before(rec.PendingExpires) || rec.PendingGen != rec.PairingGeneration ||
			owner != rp.WorkerID {
			return burn(bridge.ErrPairingInvalid)
		}
		if !rp.PublicKeyValid {
			return burn(bridge.ErrPublicKeyInvalid)
		}
		identity = bridge.NewID()
		rec.IdentityID, rec.PublicKey, rec.Binding = identity, rp.PublicKey, rec.PendingBinding
		rec.CredentialHash, rec.CredentialExpires = rp.CredentialHash, rp.ExpiresAt
		return burn(nil)
	})
	if err != nil {
		return "", err
	}
	return identity, nil
}

// Revoke implements Store.
func (p *Protocol) Revoke(ctx context.Context, workerID string) error {
	return p.update(ctx, "revoke", workerID, func(t *wtx) error {
		rec := t.rec
		if rec.PendingCode != "" {
			t.tx.Delete(codeKey(rec.PendingCode))
		}
		rec.PairingGeneration++
		clearPending(rec)
		rec.IdentityID, rec.PublicKey, rec.Binding, rec.CredentialHash, rec.CredentialExpires = "", "", nil, "", time.Time{}
		t.recDirty = true
		// A revoked worker is no longer dispatchable.
		t.reg, t.regDirty = nil, true
		t.tx.Notify(TopicWorker(workerID))
		return nil
	})
}

// record reads one worker record outside a transaction (nil when absent).
func (p *Protocol) record(ctx context.Context, workerID string) (*WorkerRecord, error) {
	vals, err := p.read(ctx, "credential", recKey(workerID))
	if err != nil {
		return nil, err
	}
	return decode[WorkerRecord](vals[0], "worker record")
}

// Credential implements Store.
func (p *Protocol) Credential(ctx context.Context, workerID, credentialHash string) (*Credential, error) {
	rec, err := p.record(ctx, workerID)
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.CredentialHash == "" || rec.CredentialHash != credentialHash || !p.b.Now().Before(rec.CredentialExpires) {
		return nil, bridge.ErrCredentialInvalid
	}
	return &Credential{
		WorkerID: workerID, IdentityID: rec.IdentityID, PublicKey: rec.PublicKey, ExpiresAt: rec.CredentialExpires,
		Binding: rec.Binding, PairingGeneration: rec.PairingGeneration,
	}, nil
}

// RefreshCredential implements Store.
func (p *Protocol) RefreshCredential(ctx context.Context, workerID, oldHash, newHash string, expiresAt time.Time) error {
	return p.update(ctx, "refresh_credential", workerID, func(t *wtx) error {
		rec := t.rec
		if rec.CredentialHash == "" || rec.CredentialHash != oldHash || !t.now.Before(rec.CredentialExpires) {
			return bridge.ErrCredentialInvalid
		}
		rec.CredentialHash, rec.CredentialExpires = newHash, expiresAt
		t.recDirty = true
		return nil
	})
}

// UseNonce implements Store: a nonce is recorded once per credential, and
// a proof dated before the backend's memory of nonces began is a replay.
func (p *Protocol) UseNonce(ctx context.Context, credentialHash, nonceHash string, timestamp time.Time) error {
	ok, err := p.insertNew(ctx, "use_nonce", "nonce:"+credentialHash+":"+nonceHash, p.nonceTTL, timestamp)
	if err != nil {
		return err
	}
	if !ok {
		return bridge.ErrProofReplayed
	}
	return nil
}
