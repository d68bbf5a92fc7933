package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/hub/store"
)

// Redis is the shared store for hub replicas. A session is three keys that expire together —
// <p>fs:{s:<sid>}:meta (hash: tenant, bytes, count), …:files (hash id → File JSON) and …:blobs (hash
// id → bytes) — and the global accounting is <p>fs:sessions (sorted set of session → expiry in ms) with
// <p>fs:sizes (hash session → bytes) and <p>fs:total, and per tenant <p>fs:tenants (hash tenant → bytes)
// with <p>fs:owners (hash session → tenant). Put and Touch are one Lua script each, so caps are
// checked and the batch written atomically, and expired sessions are subtracted from the total first.
// Like the hub's redisstore it needs one Redis (not Cluster) with maxmemory-policy noeviction.
type Redis struct {
	rdb    *redis.Client
	own    bool
	prefix string
	limits Limits
	now    func() time.Time
}

// redisFailed marks a Redis failure as a store outage (the hub answers 503
// store_unavailable with Retry-After, issue 22).
func redisFailed(err error) error {
	return store.Unavailable(fmt.Errorf("filestore: redis: %w", err))
}

// DefaultRedisPrefix is the key namespace (beside the bridge's codellm:bridge:v1:).
const DefaultRedisPrefix = "codellm:files:v1:"

// OpenRedis connects to url (redis://HOST:PORT/DB) and pings it.
func OpenRedis(ctx context.Context, url string, l Limits) (*Redis, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, redisFailed(err)
	}
	r := NewRedis(rdb, DefaultRedisPrefix, l)
	r.own = true
	return r, nil
}

// NewRedis uses an existing client (not closed by Close) and key prefix.
func NewRedis(rdb *redis.Client, prefix string, l Limits) *Redis {
	return &Redis{rdb: rdb, prefix: prefix, limits: l.WithDefaults(), now: time.Now}
}

func (r *Redis) key(sid, part string) string { return r.prefix + "fs:{s:" + sid + "}:" + part }

// reapLua subtracts expired sessions from the total; shared by both scripts.
const reapLua = `
local p, sid, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local function forget(s)
  local b = tonumber(redis.call('HGET', p..'fs:sizes', s) or '0')
  redis.call('DECRBY', p..'fs:total', b)
  local t = redis.call('HGET', p..'fs:owners', s)
  if t then redis.call('HINCRBY', p..'fs:tenants', t, -b) redis.call('HDEL', p..'fs:owners', s) end
  redis.call('HDEL', p..'fs:sizes', s)
  redis.call('ZREM', p..'fs:sessions', s)
end
for _, s in ipairs(redis.call('ZRANGEBYSCORE', p..'fs:sessions', '-inf', now)) do
  forget(s)
  redis.call('DEL', p..'fs:{s:'..s..'}:meta', p..'fs:{s:'..s..'}:files', p..'fs:{s:'..s..'}:blobs', p..'fs:{s:'..s..'}:order')
end
local mk, fk, bk, ok = p..'fs:{s:'..sid..'}:meta', p..'fs:{s:'..sid..'}:files', p..'fs:{s:'..sid..'}:blobs', p..'fs:{s:'..sid..'}:order'
local owner = redis.call('HGET', mk, 'tenant')
if not owner and redis.call('HEXISTS', p..'fs:sizes', sid) == 1 then forget(sid) end
`

// putLua: ARGV = prefix sid now tenant ttl maxFiles maxSession maxTotal n add maxTenant, then n × (id
// json data).
var putLua = redis.NewScript(reapLua + `
local tenant, ttl = ARGV[4], tonumber(ARGV[5])
local maxFiles, maxSession, maxTotal = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local n, add, maxTenant = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
if owner and owner ~= tenant then return 'not_found' end
local held = tonumber(redis.call('HGET', p..'fs:tenants', tenant) or '0')
local count = tonumber(redis.call('HGET', mk, 'count') or '0')
local bytes = tonumber(redis.call('HGET', mk, 'bytes') or '0')
local total = tonumber(redis.call('GET', p..'fs:total') or '0')
if count + n > maxFiles then return 'too_many_files' end
if bytes + add > maxSession then return 'session_full' end
if held + add > maxTenant then return 'tenant_full' end
if total + add > maxTotal then return 'store_full' end
for i = 0, n - 1 do
  local id = ARGV[12 + i*3]
  redis.call('HSET', fk, id, ARGV[13 + i*3])
  redis.call('HSET', bk, id, ARGV[14 + i*3])
  redis.call('RPUSH', ok, id)
end
redis.call('HSET', mk, 'tenant', tenant, 'count', count + n, 'bytes', bytes + add)
redis.call('INCRBY', p..'fs:total', add)
redis.call('HINCRBY', p..'fs:tenants', tenant, add)
redis.call('HSET', p..'fs:owners', sid, tenant)
redis.call('HSET', p..'fs:sizes', sid, bytes + add)
redis.call('ZADD', p..'fs:sessions', now + ttl, sid)
redis.call('PEXPIRE', mk, ttl)
if redis.call('EXISTS', fk) == 1 then redis.call('PEXPIRE', fk, ttl) redis.call('PEXPIRE', bk, ttl) redis.call('PEXPIRE', ok, ttl) end
return 'ok'
`)

// Put implements Store.
func (r *Redis) Put(ctx context.Context, tenant, sid string, files []Upload) ([]File, error) {
	if err := check(r.limits, tenant, sid, files); err != nil {
		return nil, err
	}
	now := r.now()
	args := []any{r.prefix, sid, now.UnixMilli(), tenant, r.limits.TTL.Milliseconds(),
		r.limits.MaxSessionFiles, r.limits.MaxSessionBytes, r.limits.MaxTotalBytes, len(files), batchBytes(files), r.limits.MaxTenantBytes}
	out := make([]File, 0, len(files))
	for _, u := range files {
		f := newFile(sid, u, now)
		b, _ := json.Marshal(f)
		args = append(args, f.ID, b, u.Data)
		out = append(out, f)
	}
	if err := r.script(ctx, putLua, args); err != nil {
		return nil, err
	}
	return out, nil
}

// touchLua: ARGV = prefix sid now tenant ttl.
var touchLua = redis.NewScript(reapLua + `
local tenant, ttl = ARGV[4], tonumber(ARGV[5])
if owner and owner ~= tenant then return 'not_found' end
if not owner then
  redis.call('HSET', mk, 'tenant', tenant, 'count', 0, 'bytes', 0)
  redis.call('HSET', p..'fs:sizes', sid, 0)
  redis.call('HSET', p..'fs:owners', sid, tenant)
end
redis.call('ZADD', p..'fs:sessions', now + ttl, sid)
redis.call('PEXPIRE', mk, ttl)
if redis.call('EXISTS', fk) == 1 then redis.call('PEXPIRE', fk, ttl) redis.call('PEXPIRE', bk, ttl) redis.call('PEXPIRE', ok, ttl) end
return 'ok'
`)

// Touch implements Store.
func (r *Redis) Touch(ctx context.Context, tenant, sid string) error {
	if tenant == "" || !ValidID(sid) {
		return ErrInvalid
	}
	return r.script(ctx, touchLua, []any{r.prefix, sid, r.now().UnixMilli(), tenant, r.limits.TTL.Milliseconds()})
}

// deleteLua: ARGV = prefix sid now tenant fileId. The file's size comes from its own record, so the
// session's and the store's usage drop by exactly what Put added.
var deleteLua = redis.NewScript(reapLua + `
local tenant, fid = ARGV[4], ARGV[5]
if not owner or owner ~= tenant then return 'not_found' end
local meta = redis.call('HGET', fk, fid)
if not meta then return 'not_found' end
local size = tonumber(cjson.decode(meta).size)
redis.call('HDEL', fk, fid)
redis.call('HDEL', bk, fid)
redis.call('LREM', ok, 0, fid)
redis.call('HINCRBY', mk, 'count', -1)
redis.call('HINCRBY', mk, 'bytes', -size)
redis.call('DECRBY', p..'fs:total', size)
redis.call('HINCRBY', p..'fs:tenants', tenant, -size)
redis.call('HINCRBY', p..'fs:sizes', sid, -size)
return 'ok'
`)

// Delete implements Store.
func (r *Redis) Delete(ctx context.Context, tenant, sid, fileID string) error {
	if !ValidID(sid) || !ValidID(fileID) {
		return ErrNotFound
	}
	return r.script(ctx, deleteLua, []any{r.prefix, sid, r.now().UnixMilli(), tenant, fileID})
}

func (r *Redis) script(ctx context.Context, s *redis.Script, args []any) error {
	res, err := s.Run(ctx, r.rdb, nil, args...).Text()
	if err != nil {
		if errors.Is(err, redis.ErrClosed) {
			return ErrClosed
		}
		return redisFailed(err)
	}
	switch res {
	case "ok":
		return nil
	case "not_found":
		return ErrNotFound
	case "too_many_files":
		return ErrTooManyFiles
	case "session_full":
		return ErrSessionFull
	case "store_full":
		return ErrStoreFull
	case "tenant_full":
		return ErrTenantFull
	}
	return fmt.Errorf("%w: script answered %q", errCorrupt, res)
}

// Owner implements Store.
func (r *Redis) Owner(ctx context.Context, sid string) (string, error) {
	if !ValidID(sid) {
		return "", ErrNotFound
	}
	pipe := r.rdb.Pipeline()
	owner := pipe.HGet(ctx, r.key(sid, "meta"), "tenant")
	exp := pipe.ZScore(ctx, r.prefix+"fs:sessions", sid)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", redisFailed(err)
	}
	// The sorted set is the authority on expiry: a key Redis has not expired yet is already gone when
	// its session's time has passed, as with Dir.
	if owner.Err() != nil || exp.Err() != nil || int64(exp.Val()) <= r.now().UnixMilli() {
		return "", ErrNotFound
	}
	return owner.Val(), nil
}

// List implements Store.
func (r *Redis) List(ctx context.Context, tenant, sid string) ([]File, error) {
	if t, err := r.Owner(ctx, sid); errors.Is(err, ErrNotFound) || (err == nil && t != tenant) {
		return []File{}, nil
	} else if err != nil {
		return nil, err
	}
	ids, err := r.rdb.LRange(ctx, r.key(sid, "order"), 0, -1).Result()
	if err != nil || len(ids) == 0 {
		if err != nil {
			err = redisFailed(err)
		}
		return []File{}, err
	}
	vals, err := r.rdb.HMGet(ctx, r.key(sid, "files"), ids...).Result()
	if err != nil {
		return nil, redisFailed(err)
	}
	out := make([]File, 0, len(vals))
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // expired between the two reads
		}
		var f File
		if err := json.Unmarshal([]byte(str), &f); err != nil {
			return nil, errCorrupt
		}
		out = append(out, f)
	}
	return out, nil
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, tenant, sid, fileID string) (File, []byte, error) {
	if !ValidID(sid) || !ValidID(fileID) {
		return File{}, nil, ErrNotFound
	}
	if t, err := r.Owner(ctx, sid); err != nil || t != tenant {
		if err == nil || errors.Is(err, ErrNotFound) {
			err = ErrNotFound
		}
		return File{}, nil, err
	}
	pipe := r.rdb.Pipeline()
	meta := pipe.HGet(ctx, r.key(sid, "files"), fileID)
	blob := pipe.HGet(ctx, r.key(sid, "blobs"), fileID)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return File{}, nil, redisFailed(err)
	}
	if meta.Err() != nil || blob.Err() != nil {
		return File{}, nil, ErrNotFound
	}
	var f File
	if err := json.Unmarshal([]byte(meta.Val()), &f); err != nil {
		return File{}, nil, errCorrupt
	}
	b := []byte(blob.Val())
	if int64(len(b)) != f.Size {
		return File{}, nil, fmt.Errorf("%w: %s is %d bytes, listed as %s", errCorrupt, fileID, len(b), strconv.FormatInt(f.Size, 10))
	}
	return f, b, nil
}

// Close implements Store; it closes the client only when OpenRedis made it.
func (r *Redis) Close() error {
	if r.own {
		return r.rdb.Close()
	}
	return nil
}
