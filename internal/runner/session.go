package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/codellm/codellm/internal/wire"
)

// session is one persistent workspace. Its files persist across executes; its processes never do (every
// execute's processes are dead before the execute returns).
type session struct {
	id    string
	owner string // who created it (ownerOf), for the per-credential cap
	dir   string
	key   fileID // identity of dir when it was created (tamper check)

	lock chan struct{} // capacity 1: held by the one execute (or reset) using the workspace

	// guarded by Runner.mu
	lastUsed time.Time
	busy     bool
	dirty    string             // why the workspace is in an unknown state; "" = clean
	deleted  bool               // removed from the map; the holder of lock removes the directory
	cancel   context.CancelFunc // of the execute in flight, for ResetSession
}

func checkSessionID(id string) *Error {
	switch {
	case id == "":
		return badRequest(wire.RuntimeSessionHeader + " is empty")
	case len(id) > maxSessionIDLen:
		return badRequest(wire.RuntimeSessionHeader + " is longer than " + strconv.Itoa(maxSessionIDLen) + " bytes")
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return badRequest(wire.RuntimeSessionHeader + " must be printable ASCII without spaces")
		}
	}
	return nil
}

// sessionDirName derives the directory from the ID by hashing, so no client-chosen byte reaches a path.
func sessionDirName(id string) string {
	h := sha256.Sum256([]byte("codellm-runner-session\x00" + id))
	return hex.EncodeToString(h[:16])
}

// acquireSession returns the session for id with its lock held, creating it if needed; cancel is what
// ResetSession calls to end this execute. A session that was deleted while we waited for it is replaced
// by a fresh one.
func (r *Runner) acquireSession(ctx context.Context, id string, cancel func()) (*session, *Error) {
	for {
		s, err := r.lookupOrCreate(id, ownerFrom(ctx))
		if err != nil {
			return nil, err
		}
		select {
		case s.lock <- struct{}{}:
		case <-ctx.Done():
			return nil, canceled(ctx)
		}
		r.mu.Lock()
		if s.deleted {
			// Reset or expired while we waited: whoever deletes leaves the directory to the lock holder.
			r.mu.Unlock()
			r.removeDir(s.dir)
			<-s.lock
			continue
		}
		s.busy = true
		s.cancel = cancel
		reason := s.dirty
		r.mu.Unlock()
		if reason == "" {
			if msg := r.checkTamper(s); msg != "" {
				r.markDirty(s, msg)
				reason = msg
			}
		}
		if reason != "" {
			r.releaseSession(s)
			return nil, dirty(fmt.Sprintf("session %q workspace is in an unknown state: %s; delete the session to start over", id, reason))
		}
		return s, nil
	}
}

func (r *Runner) lookupOrCreate(id, owner string) (*session, *Error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, closedErr()
	}
	now := time.Now()
	if s, ok := r.sessions[id]; ok {
		if s.busy || now.Sub(s.lastUsed) < r.cfg.SessionTTL {
			return s, nil
		}
		// Expired but not yet collected by the janitor: collect it now and start fresh.
		r.expireLocked(s)
	}
	if e := r.makeRoomLocked(owner, now); e != nil {
		return nil, e
	}
	// The sequence number keeps a new session apart from an earlier one with the same ID whose
	// directory is still being removed by the holder of its lock.
	r.seq++
	dir := filepath.Join(r.sessDir, sessionDirName(id)+"-"+strconv.FormatUint(r.seq, 10))
	if err := r.makeWorkspace(dir); err != nil {
		return nil, sandboxFailed("cannot create session workspace: "+err.Error(), err)
	}
	key, err := dirID(dir)
	if err != nil {
		r.removeDir(dir)
		return nil, sandboxFailed("cannot create session workspace: "+err.Error(), err)
	}
	s := &session{id: id, owner: owner, dir: dir, key: key, lock: make(chan struct{}, 1), lastUsed: now}
	r.sessions[id] = s
	return s, nil
}

// makeRoomLocked makes room for one more session of owner (r.mu held): expired sessions go first; at the
// owner's cap its own least recently used session idle for at least EvictIdle is evicted; with the whole
// table full, the least recently used session idle that long is. Otherwise it is 429 too_many_sessions,
// naming the limit that was hit. Without eviction 64 sessions created in a second locked every new ID out
// for the whole SessionTTL. The owner's cap waits for EvictIdle too: callers that share one credential
// (LibreChat's one API key for all its users) are one owner, and evicting its least recently used session
// at once let 32 new sessions destroy another user's session idle for a second (issue 35 item 16).
func (r *Runner) makeRoomLocked(owner string, now time.Time) *Error {
	if len(r.sessions) >= r.cfg.MaxSessions {
		r.collectExpiredLocked(now)
	}
	mine := 0 // in-process callers (owner "") are bounded by MaxSessions and their own front end
	for _, s := range r.sessions {
		if s.owner == owner {
			mine++
		}
	}
	if owner != "" && mine >= r.cfg.MaxSessionsPerOwner {
		if !r.evictLocked(now, r.cfg.EvictIdle, func(s *session) bool { return s.owner == owner }) {
			return &Error{Status: http.StatusTooManyRequests, Code: CodeTooManySessions, Kind: ErrBusy,
				Message: fmt.Sprintf("too many sessions for this credential: %d live (at most %d per credential), none idle for %s; delete one or retry later", mine, r.cfg.MaxSessionsPerOwner, r.cfg.EvictIdle)}
		}
	}
	if len(r.sessions) >= r.cfg.MaxSessions && !r.evictLocked(now, r.cfg.EvictIdle, func(*session) bool { return true }) {
		return &Error{Status: http.StatusTooManyRequests, Code: CodeTooManySessions, Kind: ErrBusy,
			Message: fmt.Sprintf("too many sessions: %d live (at most %d), none idle for %s; delete one or retry later", len(r.sessions), r.cfg.MaxSessions, r.cfg.EvictIdle)}
	}
	return nil
}

// evictLocked removes the least recently used idle session that matches and has been idle for at least
// minIdle; it reports whether one was removed.
func (r *Runner) evictLocked(now time.Time, minIdle time.Duration, match func(*session) bool) bool {
	var lru *session
	for _, s := range r.sessions {
		if !s.busy && match(s) && now.Sub(s.lastUsed) >= minIdle && (lru == nil || s.lastUsed.Before(lru.lastUsed)) {
			lru = s
		}
	}
	if lru == nil {
		return false
	}
	r.log.Info("runner: session evicted to make room", "session", lru.id, "idle", now.Sub(lru.lastUsed).Round(time.Second))
	r.expireLocked(lru)
	return true
}

type ownerKey struct{}

// WithOwner tags ctx with the credential on whose behalf sessions are created (see ownerOf).
func WithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

func ownerFrom(ctx context.Context) string {
	o, _ := ctx.Value(ownerKey{}).(string)
	return o
}

// ownerOf names the credential of an HTTP request without keeping it: the owner an in-process caller put
// in the request's context (WithOwner: the bridge worker names the hub tenant), else a hash of the client
// certificate, else of the Authorization header ("" when there is none of them). Nothing a request
// carries over the network can set the first.
func ownerOf(req *http.Request) string {
	if o := ownerFrom(req.Context()); o != "" {
		return o
	}
	var material []byte
	switch {
	case req.TLS != nil && len(req.TLS.PeerCertificates) > 0:
		material = append([]byte("cert\x00"), req.TLS.PeerCertificates[0].Raw...)
	case req.Header.Get("Authorization") != "":
		material = []byte("authorization\x00" + req.Header.Get("Authorization"))
	default:
		return ""
	}
	h := sha256.Sum256(material)
	return hex.EncodeToString(h[:8])
}

// releaseSession ends an execute's hold on s.
func (r *Runner) releaseSession(s *session) {
	r.mu.Lock()
	s.busy = false
	s.cancel = nil
	s.lastUsed = time.Now()
	deleted := s.deleted
	r.mu.Unlock()
	if deleted {
		r.removeDir(s.dir)
	}
	<-s.lock
}

func (r *Runner) markDirty(s *session, why string) {
	r.mu.Lock()
	if s.dirty == "" {
		s.dirty = why
	}
	r.mu.Unlock()
	r.log.Warn("runner: session workspace marked dirty", "session", s.id, "reason", why)
}

// checkTamper reports a workspace directory that is gone or was replaced behind the runner's back.
func (r *Runner) checkTamper(s *session) string {
	key, err := dirID(s.dir)
	switch {
	case err != nil:
		return "the workspace directory is missing or unreadable (" + err.Error() + ")"
	case key != s.key:
		return "the workspace directory was replaced"
	}
	return ""
}

// ResetSession deletes a session: its in-flight execute (if any) is killed, and its workspace is removed.
// Deleting an unknown session succeeds (the state is already gone). A later execute with the same ID
// starts from an empty workspace.
func (r *Runner) ResetSession(id string) error {
	if err := checkSessionID(id); err != nil {
		return err
	}
	r.mu.Lock()
	s, ok := r.sessions[id]
	if !ok {
		r.mu.Unlock()
		return nil
	}
	delete(r.sessions, id)
	s.deleted = true
	if s.cancel != nil {
		s.cancel()
	}
	r.mu.Unlock()
	// Whoever holds the lock removes the directory when it lets go; if nobody does, we take it and do it.
	select {
	case s.lock <- struct{}{}:
		r.removeDir(s.dir)
		<-s.lock
	default:
	}
	return nil
}

// expireLocked removes s from the map (r.mu held). s is idle, so its directory can go now.
func (r *Runner) expireLocked(s *session) {
	delete(r.sessions, s.id)
	s.deleted = true
	select {
	case s.lock <- struct{}{}:
		r.removeDir(s.dir)
		<-s.lock
	default: // an execute is just acquiring it; it sees deleted, releases and the dir goes then
	}
}

func (r *Runner) collectExpiredLocked(now time.Time) {
	for _, s := range r.sessions {
		if !s.busy && now.Sub(s.lastUsed) >= r.cfg.SessionTTL {
			r.log.Info("runner: session expired", "session", s.id)
			r.expireLocked(s)
		}
	}
}

func (r *Runner) janitorLoop() {
	defer r.janitor.Done()
	tick := r.cfg.SessionTTL / 4
	tick = max(tick, 10*time.Millisecond)
	tick = min(tick, time.Minute)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-r.base.Done():
			return
		case now := <-t.C:
			r.mu.Lock()
			r.collectExpiredLocked(now)
			r.mu.Unlock()
		}
	}
}

// makeWorkspace creates a workspace directory, with its tmpfs when WorkspaceSize is mounted.
func (r *Runner) makeWorkspace(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if r.mounted {
		if err := mountQuota(dir, r.cfg.WorkspaceSize); err != nil {
			os.Remove(dir)
			return err
		}
	}
	return nil
}

// removeDir removes a workspace (unmounting its tmpfs first). A failed unmount leaves the directory in
// place rather than deleting through a mount point.
// removeLater removes a one-shot run's workspace once its reply is on its
// way: the unmount waits for an RCU grace period and the removal walks the
// tree, about a millisecond that the caller need not wait for (nothing else
// ever uses the directory). Close waits for it like for a request in
// flight; a crash leaves it to the next start's sweep.
func (r *Runner) removeLater(dir string) {
	r.inflight.Add(1)
	go func() {
		defer r.inflight.Done()
		r.removeDir(dir)
	}()
}

func (r *Runner) removeDir(dir string) {
	if r.mounted {
		if err := unmountQuota(dir); err != nil {
			r.log.Error("runner: remove workspace", "dir", dir, "err", err)
			return
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		r.log.Error("runner: remove workspace", "dir", dir, "err", err)
	}
}

// Sessions returns the number of live sessions.
func (r *Runner) Sessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

func closedErr() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Message: "the runner is shutting down", Kind: ErrClosed}
}

func canceled(ctx context.Context) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Message: "execution canceled: " + context.Cause(ctx).Error(),
		Kind: ErrCanceled, Err: ctx.Err()}
}
