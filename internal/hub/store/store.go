// Package store defines the hub's state interface: every bridge and pairing
// operation of spec §7 as one atomic step, so the embedded bbolt backend and
// a later Redis backend are interchangeable behind the hub. Errors are the
// bridge sentinels (bridge.ErrWorkerFenced, …), which already carry their
// HTTP status (§3.10).
package store

import (
	"context"
	"encoding/json"
	"math"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// Default lifetimes of §7.1. Backends take them as options so tests can use
// short real TTLs.
const (
	DefaultLeaseTTL = 60 * time.Second
	DefaultNonceTTL = 120 * time.Second
	// DefaultGrace is how long assignment records, locks and settlements
	// outlive the assignment deadline.
	DefaultGrace = 30 * time.Second
	// DefaultFenceRetention is how long a retired incarnation's fence mark
	// is kept before it may be collected.
	DefaultFenceRetention = 24 * time.Hour
)

// ReadyTTL is the lifetime of a readiness mark: min(ttl, ceil(ttl/2)+5s).
func ReadyTTL(leaseTTL time.Duration) time.Duration {
	secs := math.Ceil(leaseTTL.Seconds() / 2)
	return min(leaseTTL, time.Duration(secs)*time.Second+5*time.Second)
}

// Credential is what authenticating a worker yields.
type Credential struct {
	WorkerID   string
	IdentityID string
	PublicKey  string // SPKI PEM
	ExpiresAt  time.Time
	Binding    *bridge.Binding
	// PairingGeneration at the time of authentication; Register uses it to
	// detect a revoke racing the request.
	PairingGeneration int64
}

// Auth is the authenticated identity passed to worker operations. In static
// mode it is the zero value (no identity checks apply).
type Auth struct {
	CredentialHash    string
	IdentityID        string
	PairingGeneration int64
	Binding           *bridge.Binding
}

// Confirm checks, on a worker record an operation's transaction read, that the credential the request
// was authenticated with is still the worker's live one. The hub verifies signatures of register, lease,
// ack and settle with credentials it cached, to spare a store read per request; this check is what
// refuses such a request once the credential was revoked, rotated, re-paired or expired, before the
// operation writes anything: CREDENTIAL_INVALID, as a fresh lookup would answer (the worker must be
// paired again). The same credential under another pairing generation is a revoke that raced the request
// (WORKER_FENCED), under another identity WORKER_UNAUTHORIZED (§3.8, §7.2 step 1). The zero Auth (static
// worker tokens) has nothing to confirm.
func (a Auth) Confirm(rec *WorkerRecord, now time.Time) error {
	switch {
	case a.CredentialHash == "":
		return nil
	case rec == nil || rec.CredentialHash != a.CredentialHash || !now.Before(rec.CredentialExpires):
		return bridge.ErrCredentialInvalid
	case rec.PairingGeneration != a.PairingGeneration:
		return bridge.ErrWorkerFenced
	case rec.IdentityID != a.IdentityID:
		return bridge.ErrWorkerUnauthorized
	}
	return nil
}

// RedeemParams is one pairing redemption.
type RedeemParams struct {
	WorkerID       string
	CodeHash       string
	PublicKey      string
	PublicKeyValid bool // checked by the caller; an invalid key burns the code
	CredentialHash string
	ExpiresAt      time.Time
}

// RegisterParams is one registration (or heartbeat).
type RegisterParams struct {
	WorkerID      string
	IncarnationID string
	Capabilities  bridge.Capabilities
	// CapabilitiesJSON is the canonical form of the capabilities as received,
	// returned verbatim by Status.
	CapabilitiesJSON []byte
	Auth             Auth
	// Slots is how many lease slots the worker asked for (capabilities.workspaceLeaseSlots; 0: none);
	// it is granted up to MaxSlots.
	Slots int
}

// Registration is the result of Register and part of WorkerState.
type Registration struct {
	WorkerID         string
	IncarnationID    string
	Generation       int64
	RegisteredAt     time.Time
	ExpiresAt        time.Time
	LeaseTTL         time.Duration
	Capabilities     bridge.Capabilities
	CapabilitiesJSON []byte
	IdentityID       string
	Binding          *bridge.Binding
	// Slots is the granted lease slot count (≥ 1); Pool names the worker's pool (slots.go).
	Slots int    `json:"slots,omitempty"`
	Pool  string `json:"pool,omitempty"`
}

// WorkerState is a snapshot used by status and worker selection.
type WorkerState struct {
	WorkerID     string
	Online       bool
	Ready        bool
	Busy         bool // every lease slot is taken (one slot: the worker lock is held)
	Active       int  // assignments holding a slot
	Registration *Registration
	// Binding of the paired identity (nil when unbound or static).
	Binding *bridge.Binding
}

// EnqueueParams is one dispatch (§7.3 steps 1–3).
type EnqueueParams struct {
	WorkerID     string
	AssignmentID string
	// LeaseToken travels with the queued item so the lease can deliver it;
	// only LeaseTokenHash may be persisted.
	LeaseToken       string
	LeaseTokenHash   string
	ExpiresAt        time.Time
	RuntimeSessionID string
	ExecutionKind    string
	Request          []byte // canonical JSON of the assignment request
	// Dispatcher is the hub replica waiting for the result. While it waits the assignment is listed
	// under it, so that when it dies another replica can end what it left (Abandon).
	Dispatcher string
	// FromIdle: the dispatcher took the worker out of its idle set (TakeIdle).
	FromIdle bool
	// Session, when set, is recorded as run by this worker (its WorkerID, IncarnationID and LastUsed are
	// filled in), in the same step: a new exec session, or one whose record is stale or names another.
	Session *Session
}

// Assignment is a stored assignment as the lease returns it (the token itself
// is never stored; the hub keeps it for the one delivery).
type Assignment struct {
	ID               string
	WorkerID         string
	IncarnationID    string
	Generation       int64
	LeaseToken       string `json:"-"`
	LeaseTokenHash   string
	IdentityID       string
	ExpiresAt        time.Time
	RuntimeSessionID string
	ExecutionKind    string
	Request          []byte
	Dispatcher       string
	// Slot is the lease slot that leased it (-1: a lease without a slot); set by Lease, not stored.
	Slot int `json:"-"`
}

// LeaseParams is one lease.
type LeaseParams struct {
	WorkerID, IncarnationID, IdentityID string
	// Auth is confirmed on the worker record each read of the lease makes (Auth.Confirm).
	Auth Auth
	// Slot is the lease slot (-1: a lease that names none).
	Slot int
	// Woken: work was just queued for the worker (its topic was notified), so the one-read check for the
	// common empty poll is skipped; Queued is the assignment the notification named, if any
	// (TopicWorkQueued), read with the worker's records.
	Woken  bool
	Queued string
}

// AckParams is one acknowledgement.
type AckParams struct {
	Auth           Auth // confirmed in the transaction (Auth.Confirm)
	WorkerID       string
	AssignmentID   string
	IncarnationID  string
	Generation     int64
	LeaseTokenHash string
}

// SettleParams is one settlement; Canonical is its canonical JSON, the bytes
// compared for idempotency.
type SettleParams struct {
	Auth           Auth // confirmed in the transaction (Auth.Confirm)
	WorkerID       string
	AssignmentID   string
	IncarnationID  string
	Generation     int64
	LeaseTokenHash string
	IdentityID     string
	Status         string
	Canonical      []byte
}

// Settlement is a stored settlement.
type Settlement struct {
	Status    string
	Canonical []byte
}

// Store is the hub's state. Every method is one atomic step of §7.
type Store interface {
	// CreatePairing records a new code for workerID, replacing any previous
	// one, for the pairing generation current at this moment.
	CreatePairing(ctx context.Context, workerID, codeHash string, binding *bridge.Binding, expiresAt time.Time) error
	// RedeemPairing consumes a code and installs a new identity with its
	// first credential. It returns the new identity ID.
	RedeemPairing(ctx context.Context, p RedeemParams) (string, error)
	// Revoke advances the pairing generation and deletes the pending code,
	// the identity and its credential.
	Revoke(ctx context.Context, workerID string) error
	// Credential returns the worker's active, unexpired credential with this
	// digest, or ErrCredentialInvalid.
	Credential(ctx context.Context, workerID, credentialHash string) (*Credential, error)
	// RefreshCredential atomically replaces the active credential oldHash.
	RefreshCredential(ctx context.Context, workerID, oldHash, newHash string, expiresAt time.Time) error
	// UseNonce records (credentialHash, nonceHash) or fails with
	// ErrProofReplayed; proofs dated before the store was opened are also
	// replays when nonces do not survive a restart.
	UseNonce(ctx context.Context, credentialHash, nonceHash string, timestamp time.Time) error

	Register(ctx context.Context, p RegisterParams) (*Registration, error)
	Ready(ctx context.Context, workerID, incarnationID string, registrationGeneration int64) error
	Worker(ctx context.Context, workerID string) (*WorkerState, error)
	Workers(ctx context.Context) ([]WorkerState, error)

	Enqueue(ctx context.Context, p EnqueueParams) (*Assignment, error)
	// Lease returns the incarnation's claimed or next queued assignment, or
	// nil when there is none. It never blocks. LeaseSlot does the same for
	// one lease slot of a worker granted several, as LeaseParams say.
	Lease(ctx context.Context, workerID, incarnationID, identityID string) (*Assignment, error)
	LeaseSlot(ctx context.Context, lp LeaseParams) (*Assignment, error)
	// Pools lists the pools of workers (slots.go); TakeIdle takes a pool's
	// longest-idle worker out of its idle set (the caller then enqueues on
	// it); Online counts a pool's registered workers.
	Pools(ctx context.Context) ([]Pool, error)
	TakeIdle(ctx context.Context, pool string) (string, bool, error)
	Online(ctx context.Context, pool string) (int, error)
	Ack(ctx context.Context, p AckParams) error
	// Cancelled answers the worker's cancellation poll (§3.6).
	Cancelled(ctx context.Context, workerID, incarnationID, assignmentID string) (bool, error)
	// Cancel sets the cancellation mark (client went away).
	Cancel(ctx context.Context, workerID, assignmentID string) error
	Settle(ctx context.Context, p SettleParams) error
	// Settlement returns the stored settlement or nil.
	Settlement(ctx context.Context, workerID, assignmentID string) (*Settlement, error)
	// Complete finalises a dispatch (§7.3 steps 4, 6, 7): it returns the
	// settlement if one arrived, committing a stateful session, or
	// ErrAssignmentExpired after cleaning up an unsettled assignment.
	Complete(ctx context.Context, workerID, assignmentID string) (*Settlement, error)
	// Collect is Complete for a dispatcher told that the settlement arrived: before one is stored it
	// changes nothing and returns nil, nil (a wake-up may come early). Collecting a settlement is one
	// read of the store.
	Collect(ctx context.Context, workerID, assignmentID string) (*Settlement, error)
	// Withdraw takes back an assignment that was never acknowledged (its
	// worker vanished), clearing its fence and lock so it can be dispatched
	// elsewhere. It fails with ErrAssignmentFenced once the worker acked it.
	Withdraw(ctx context.Context, workerID, assignmentID string) error
	// ResetWorkspace clears a runtime session's workspace fence (§3.7).
	ResetWorkspace(ctx context.Context, workerID, incarnationID, runtimeSessionID string) error
	// Session returns an exec session (nil when unknown or expired); BindSession records which worker
	// ran it (session.go). Every replica and a restarted hub see the same sessions.
	Session(ctx context.Context, sid string) (*Session, error)
	BindSession(ctx context.Context, s Session) error
	// Abandon ends every assignment dispatcher (a hub replica found dead) was still waiting for, as if
	// its client had gone away (Complete): work never acknowledged is dropped so that it does not run
	// for nobody, acknowledged work is cancelled. It returns how many it ended.
	Abandon(ctx context.Context, dispatcher string) (int, error)

	// Epoch is the identity of the stored data (Backend.Epoch): the hub
	// learns it at start and detects a store that lost its state.
	Epoch(ctx context.Context, create bool) (string, error)

	Close() error
}

// WorkerRecord is the persistent part of one worker's state (§7.1), encoded as JSON by every store
// backend so that their records cannot drift apart.
type WorkerRecord struct {
	WorkerID          string `json:"workerId"`
	PairingGeneration int64  `json:"pairingGeneration"`

	PendingCode    string          `json:"pendingCode,omitempty"`
	PendingExpires time.Time       `json:"pendingExpires,omitzero"`
	PendingBinding *bridge.Binding `json:"pendingBinding,omitempty"`
	PendingGen     int64           `json:"pendingGen,omitempty"`

	IdentityID        string          `json:"identityId,omitempty"`
	PublicKey         string          `json:"publicKey,omitempty"`
	Binding           *bridge.Binding `json:"binding,omitempty"`
	CredentialHash    string          `json:"credentialHash,omitempty"`
	CredentialExpires time.Time       `json:"credentialExpires,omitzero"`

	RegGeneration int64  `json:"registrationGeneration"`
	RegOwner      string `json:"registrationOwner,omitempty"`
	// AssignGeneration is a persisted ceiling: generations up to it may
	// have been issued (the embedded store reserves it in blocks so that a
	// dispatch does not cost an fsync; monotonic, §7.1).
	AssignGeneration int64 `json:"assignmentGeneration"`

	Fenced          map[string]time.Time `json:"fenced,omitempty"`
	Quarantined     map[string]time.Time `json:"quarantined,omitempty"`
	WorkspaceFences map[string]string    `json:"workspaceFences,omitempty"`
}

// Clone returns a deep copy (the maps included).
func (r *WorkerRecord) Clone() *WorkerRecord {
	b, _ := json.Marshal(r)
	var c WorkerRecord
	_ = json.Unmarshal(b, &c)
	return &c
}
