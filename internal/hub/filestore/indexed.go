package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/hub/store"
)

// Indexed keeps the file index in the hub's own store.Backend — the embedded bbolt file or the shared
// Redis, with their transactions, expiry and outage handling — and the bytes in a Blobs store (a
// directory beside the embedded store, or Redis). One record per session, "files:{s:<sid>}", holds its
// owner, expiry and file list; "files:usage" and one "files:{t:<tenant>}:usage" per tenant count live
// sessions' bytes by expiry bucket (usage.go) for the store's and the tenant's caps. A Put
// writes its blobs first and then the index in one transaction, removing the blobs when the transaction
// refuses (a cap, another tenant) or fails, so the index never lists a file whose bytes are missing.
type Indexed struct {
	b      store.Backend
	blobs  Blobs
	limits Limits
	now    func() time.Time

	mu       sync.Mutex
	swept    time.Time
	inflight map[string]int // sessions whose Put has written blobs the index does not list yet
}

// Blobs stores file bytes by session and id.
type Blobs interface {
	Put(ctx context.Context, sid, id string, data []byte, expires time.Time) error
	Get(ctx context.Context, sid, id string) ([]byte, error) // ErrNotFound when absent
	// Extend moves the expiry of a session's blobs.
	Extend(ctx context.Context, sid string, ids []string, expires time.Time) error
	Delete(ctx context.Context, sid string, ids []string) error
	// Sweep removes the blobs of sessions live reports dead (backends that expire keys do nothing).
	Sweep(ctx context.Context, live func(sid string) bool) error
	Close() error
}

// NewIndexed builds the store over the hub's backend and a blob store.
func NewIndexed(b store.Backend, blobs Blobs, l Limits) *Indexed {
	return &Indexed{b: b, blobs: blobs, limits: l.WithDefaults(), now: b.Now, inflight: map[string]int{}}
}

func sessionKey(sid string) string { return "files:{s:" + sid + "}" }

type sessionRec struct {
	Tenant  string    `json:"tenant"`
	Expires time.Time `json:"expires"`
	Bytes   int64     `json:"bytes"`
	Files   []File    `json:"files"`
}

// decodeSession reads a session record; nil (absent, expired by the backend or by its own expiry) is nil.
func decodeSession(raw []byte, now time.Time) (*sessionRec, error) {
	if raw == nil {
		return nil, nil
	}
	var s sessionRec
	if err := json.Unmarshal(raw, &s); err != nil || s.Tenant == "" {
		return nil, store.ErrCorrupt
	}
	if !s.Expires.After(now) {
		return nil, nil
	}
	return &s, nil
}

// Put implements Store.
func (x *Indexed) Put(ctx context.Context, tenant, sid string, files []Upload) ([]File, error) {
	if err := check(x.limits, tenant, sid, files); err != nil {
		return nil, err
	}
	now := x.now()
	expires := now.Add(x.limits.TTL)
	// Until the index lists them, the session's new blobs are only known here: the sweep must not take
	// them for a dead session's (issue 35 item 8: it did, and uploads answered 200 downloaded 404).
	x.hold(sid, 1)
	defer x.hold(sid, -1)
	out := make([]File, 0, len(files))
	var ids []string
	for _, u := range files {
		f := newFile(sid, u, now)
		if err := x.blobs.Put(ctx, sid, f.ID, u.Data, expires); err != nil {
			_ = x.blobs.Delete(context.WithoutCancel(ctx), sid, ids)
			return nil, err
		}
		out, ids = append(out, f), append(ids, f.ID)
	}
	add := batchBytes(files)
	var all []string
	err := x.b.Update(ctx, func(t store.Txn) error {
		s, l, err := x.load(t, sid, tenant, now)
		if err != nil {
			return err
		}
		switch {
		case s.Tenant != tenant:
			return store.Abort(ErrNotFound)
		case len(s.Files)+len(files) > x.limits.MaxSessionFiles:
			return store.Abort(ErrTooManyFiles)
		case s.Bytes+add > x.limits.MaxSessionBytes:
			return store.Abort(ErrSessionFull)
		case l.tenant.total(now)+add > x.limits.MaxTenantBytes:
			return store.Abort(ErrTenantFull)
		case l.global.total(now)+add > x.limits.MaxTotalBytes:
			return store.Abort(ErrStoreFull)
		}
		s.Files, s.Bytes, s.Expires = append(s.Files, out...), s.Bytes+add, expires
		all = all[:0]
		for _, f := range s.Files {
			all = append(all, f.ID)
		}
		return x.write(t, sid, s, l)
	})
	if err != nil {
		_ = x.blobs.Delete(context.WithoutCancel(ctx), sid, ids)
		return nil, unwrapAbort(err)
	}
	_ = x.blobs.Extend(ctx, sid, all, expires)
	x.sweep(ctx, now)
	return out, nil
}

// ledger is what a transaction read of the usage records, and the session as it was then.
type ledger struct {
	global, tenant *usage
	tenantKey      string
	was            sessionRec // the session's bytes and expiry before the change
}

// write stores a session record and moves its bytes in both usage records, in t.
func (x *Indexed) write(t store.Txn, sid string, s *sessionRec, l *ledger) error {
	gran := granularity(x.limits.TTL)
	for _, u := range []*usage{l.global, l.tenant} {
		u.move(l.was.Expires, l.was.Bytes, s.Expires, s.Bytes, gran)
	}
	sb, err := json.Marshal(s)
	if err != nil {
		return store.Abort(err)
	}
	t.Put(sessionKey(sid), sb, store.Durable, s.Expires)
	for key, u := range map[string]*usage{usageKey: l.global, l.tenantKey: l.tenant} {
		ub, err := json.Marshal(u)
		if err != nil {
			return store.Abort(err)
		}
		t.Put(key, ub, store.Durable, u.expires())
	}
	return nil
}

func unwrapAbort(err error) error {
	if cause, ok := store.IsAbort(err); ok {
		return cause
	}
	return err
}

// Touch implements Store.
func (x *Indexed) Touch(ctx context.Context, tenant, sid string) error {
	if tenant == "" || !ValidID(sid) {
		return ErrInvalid
	}
	now := x.now()
	expires := now.Add(x.limits.TTL)
	var ids []string
	err := x.b.Update(ctx, func(t store.Txn) error {
		s, l, err := x.load(t, sid, tenant, now)
		if err != nil {
			return err
		}
		if s.Tenant != tenant {
			return store.Abort(ErrNotFound)
		}
		s.Expires = expires
		ids = ids[:0]
		for _, f := range s.Files {
			ids = append(ids, f.ID)
		}
		return x.write(t, sid, s, l)
	})
	if err != nil {
		return unwrapAbort(err)
	}
	return x.blobs.Extend(ctx, sid, ids, expires)
}

func (x *Indexed) session(ctx context.Context, sid string) (*sessionRec, error) {
	if !ValidID(sid) {
		return nil, nil
	}
	recs, err := x.b.Read(ctx, sessionKey(sid))
	if err != nil {
		return nil, err
	}
	return decodeSession(recs[0], x.now())
}

// Owner implements Store.
func (x *Indexed) Owner(ctx context.Context, sid string) (string, error) {
	s, err := x.session(ctx, sid)
	if err != nil {
		return "", err
	}
	if s == nil {
		return "", ErrNotFound
	}
	return s.Tenant, nil
}

// List implements Store.
func (x *Indexed) List(ctx context.Context, tenant, sid string) ([]File, error) {
	s, err := x.session(ctx, sid)
	if err != nil {
		return nil, err
	}
	if s == nil || s.Tenant != tenant {
		return []File{}, nil
	}
	return slices.Clone(s.Files), nil
}

// Get implements Store.
func (x *Indexed) Get(ctx context.Context, tenant, sid, fileID string) (File, []byte, error) {
	s, err := x.session(ctx, sid)
	if err != nil {
		return File{}, nil, err
	}
	if s == nil || s.Tenant != tenant {
		return File{}, nil, ErrNotFound
	}
	i := slices.IndexFunc(s.Files, func(f File) bool { return f.ID == fileID })
	if i < 0 {
		return File{}, nil, ErrNotFound
	}
	data, err := x.blobs.Get(ctx, sid, fileID)
	if err != nil {
		return File{}, nil, err
	}
	if int64(len(data)) != s.Files[i].Size {
		return File{}, nil, errCorrupt
	}
	return s.Files[i], data, nil
}

// Delete implements Store: the index forgets the file in one transaction, then its bytes are removed
// (a failure there leaves bytes no index lists, which expire or are swept with their session).
func (x *Indexed) Delete(ctx context.Context, tenant, sid, fileID string) error {
	if !ValidID(sid) {
		return ErrNotFound
	}
	now := x.now()
	err := x.b.Update(ctx, func(t store.Txn) error {
		s, l, err := x.load(t, sid, tenant, now)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(s.Files, func(f File) bool { return f.ID == fileID })
		if s.Tenant != tenant || i < 0 {
			return store.Abort(ErrNotFound)
		}
		s.Bytes -= s.Files[i].Size
		s.Files = slices.Delete(s.Files, i, i+1)
		return x.write(t, sid, s, l)
	})
	if err != nil {
		return unwrapAbort(err)
	}
	return x.blobs.Delete(ctx, sid, []string{fileID})
}

// sweep lets the blob store drop expired sessions' bytes, at most once a minute.
func (x *Indexed) sweep(ctx context.Context, now time.Time) {
	x.mu.Lock()
	due := now.Sub(x.swept) >= time.Minute
	if due {
		x.swept = now
	}
	x.mu.Unlock()
	if !due {
		return
	}
	_ = x.blobs.Sweep(ctx, func(sid string) bool {
		if x.busy(sid) {
			return true
		}
		s, err := x.session(ctx, sid)
		return err != nil || s != nil // keep on doubt
	})
}

// hold counts a Put in flight in sid (d = 1 before its blobs are written, -1 when it is done).
func (x *Indexed) hold(sid string, d int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.inflight[sid] += d; x.inflight[sid] <= 0 {
		delete(x.inflight, sid)
	}
}

func (x *Indexed) busy(sid string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.inflight[sid] > 0
}

// Close closes the blob store (the backend belongs to the hub).
func (x *Indexed) Close() error { return x.blobs.Close() }

// DirBlobs keeps blobs as <root>/<sid>/<id>, written to a temporary name and renamed.
type DirBlobs struct{ root string }

// OpenDirBlobs creates root when missing.
func OpenDirBlobs(root string) (*DirBlobs, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	return &DirBlobs{root: root}, nil
}

func (d *DirBlobs) Put(_ context.Context, sid, id string, data []byte, _ time.Time) error {
	if err := os.MkdirAll(filepath.Join(d.root, sid), 0o700); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(d.root, sid, id), data)
}

func (d *DirBlobs) Get(_ context.Context, sid, id string) ([]byte, error) {
	if !ValidID(sid) || !ValidID(id) {
		return nil, ErrNotFound
	}
	b, err := os.ReadFile(filepath.Join(d.root, sid, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotFound
	}
	return b, err
}

func (d *DirBlobs) Extend(context.Context, string, []string, time.Time) error { return nil }

func (d *DirBlobs) Delete(_ context.Context, sid string, ids []string) error {
	for _, id := range ids {
		_ = os.Remove(filepath.Join(d.root, sid, id))
	}
	// The session's directory stays: a concurrent Put may have just created it and be about to write
	// into it (removing it failed that Put with 500). The sweep removes it with its dead session.
	return nil
}

func (d *DirBlobs) Sweep(_ context.Context, live func(string) bool) error {
	ents, err := os.ReadDir(d.root)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() && ValidID(e.Name()) && !live(e.Name()) {
			_ = os.RemoveAll(filepath.Join(d.root, e.Name()))
		}
	}
	return nil
}

func (d *DirBlobs) Close() error { return nil }

// RedisBlobs keeps blobs as keys <prefix>fb:{s:<sid>}:<id> that expire with their session.
type RedisBlobs struct {
	rdb    *redis.Client
	prefix string
	own    bool
}

// OpenRedisBlobs connects to url and pings it.
func OpenRedisBlobs(ctx context.Context, url string) (*RedisBlobs, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("filestore: redis: %w", err)
	}
	return &RedisBlobs{rdb: rdb, prefix: DefaultRedisPrefix, own: true}, nil
}

// NewRedisBlobs uses an existing client (not closed by Close).
func NewRedisBlobs(rdb *redis.Client, prefix string) *RedisBlobs {
	return &RedisBlobs{rdb: rdb, prefix: prefix}
}

func (r *RedisBlobs) key(sid, id string) string { return r.prefix + "fb:{s:" + sid + "}:" + id }

func (r *RedisBlobs) Put(ctx context.Context, sid, id string, data []byte, expires time.Time) error {
	return r.rdb.Set(ctx, r.key(sid, id), data, time.Until(expires)).Err()
}

func (r *RedisBlobs) Get(ctx context.Context, sid, id string) ([]byte, error) {
	b, err := r.rdb.Get(ctx, r.key(sid, id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return b, err
}

func (r *RedisBlobs) Extend(ctx context.Context, sid string, ids []string, expires time.Time) error {
	pipe := r.rdb.Pipeline()
	for _, id := range ids {
		pipe.PExpireAt(ctx, r.key(sid, id), expires)
	}
	_, err := pipe.Exec(ctx)
	return err
}

func (r *RedisBlobs) Delete(ctx context.Context, sid string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = r.key(sid, id)
	}
	return r.rdb.Del(ctx, keys...).Err()
}

func (r *RedisBlobs) Sweep(context.Context, func(string) bool) error { return nil }

func (r *RedisBlobs) Close() error {
	if r.own {
		return r.rdb.Close()
	}
	return nil
}

// load reads a session's record (a fresh one owned by tenant when absent) and the store's and the
// tenant's usage records inside one transaction. A record that does not decode aborts it.
func (x *Indexed) load(t store.Txn, sid, tenant string, now time.Time) (*sessionRec, *ledger, error) {
	l := &ledger{tenantKey: tenantUsageKey(tenant)}
	recs, err := t.Get(sessionKey(sid), usageKey, l.tenantKey)
	if err != nil {
		return nil, nil, err
	}
	s, err := decodeSession(recs[0], now)
	if err != nil {
		return nil, nil, store.Abort(err)
	}
	gran := granularity(x.limits.TTL)
	if l.global, err = decodeUsage(recs[1], gran); err != nil {
		return nil, nil, store.Abort(err)
	}
	if l.tenant, err = decodeUsage(recs[2], gran); err != nil {
		return nil, nil, store.Abort(err)
	}
	if s == nil {
		s = &sessionRec{Tenant: tenant}
	}
	l.was = sessionRec{Bytes: s.Bytes, Expires: s.Expires}
	return s, l, nil
}
