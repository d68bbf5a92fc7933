package store

import (
	"context"
	"time"
)

// Session is what the hub remembers of one exec session (bridge-protocol §13.1): whose it is and which
// worker ran it last. On a stateful worker the session's files live in that worker's runner, so the
// session can only continue there, and only while the incarnation that holds them is the one registered.
// The record is in the store, so every hub replica, and a hub restarted on the same bbolt file, continues
// a session on its worker.
type Session struct {
	ID       string `json:"-"`
	TenantID string `json:"tenantId"`
	// WorkerID ran the session last; IncarnationID is the worker process that ran it.
	WorkerID      string `json:"workerId"`
	IncarnationID string `json:"incarnationId,omitempty"`
	// Stateful: the session's state lives on WorkerID (its runtimeSessionId workspace).
	Stateful bool      `json:"stateful,omitempty"`
	LastUsed time.Time `json:"lastUsed"`
}

// SessionIdle is how long an unused session is remembered.
const SessionIdle = 24 * time.Hour

// SessionRefresh: a use rewrites an unchanged session record only when it is older than this, so that a
// busy session does not cost a durable write per request.
const SessionRefresh = time.Hour

// sessionRecKey is the session's record; the ID is hashed like workspace fences.
func sessionRecKey(sid string) string { return "sess:" + sessionKey(sid) }

// Session returns the exec session sid, or nil when it is unknown or was idle for SessionIdle.
func (p *Protocol) Session(ctx context.Context, sid string) (*Session, error) {
	vals, err := p.read(ctx, "session", sessionRecKey(sid))
	if err != nil {
		return nil, err
	}
	s, err := decode[Session](vals[0], "session")
	if s != nil {
		s.ID = sid
	}
	return s, err
}

// BindSession records that s.WorkerID (incarnation s.IncarnationID) ran session s.ID for s.TenantID just
// now. The record is Durable and lives SessionIdle from its last write; a use that changes nothing
// rewrites it at most once per SessionRefresh. (Dispatch records a session with its assignment instead,
// EnqueueParams.Session; this is for a caller that binds one by itself.)
func (p *Protocol) BindSession(ctx context.Context, s Session) error {
	return p.observe("bind_session", p.b.Update(ctx, func(tx Txn) error {
		k := sessionRecKey(s.ID)
		vals, err := tx.Get(k)
		if err != nil {
			return Abort(err)
		}
		now := tx.Now()
		old, err := decode[Session](vals[0], "session")
		if err == nil && old != nil && old.TenantID == s.TenantID && old.WorkerID == s.WorkerID &&
			old.IncarnationID == s.IncarnationID && old.Stateful == s.Stateful && now.Sub(old.LastUsed) < SessionRefresh {
			return nil
		}
		s.LastUsed = now
		tx.Put(k, encode(s), Durable, now.Add(SessionIdle))
		return nil
	}))
}
