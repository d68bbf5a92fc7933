package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codellm/codellm/internal/hub/store"
)

// maxAttempts bounds optimistic retries of one operation. Transactions are
// per worker, so contention comes only from concurrent requests about the
// same worker; a few attempts settle it.
const maxAttempts = 64

// backend implements store.Backend on Redis.
type backend struct {
	rdb    *redis.Client
	prefix string
	now    func() time.Time
	closed atomic.Bool
	// origin names this process's messages on the change feed, so that WatchChanges skips its own (the
	// local listener was told at once).
	origin string
	notify atomic.Pointer[func(string)]
	// epoch is InsertNew's memo of the keyspace epoch, trusted for epochRecheck.
	epoch        epochMemo
	epochRecheck time.Duration
}

var _ store.Backend = (*backend)(nil)

func (b *backend) key(k string) string    { return b.prefix + k }
func (b *backend) changesChannel() string { return b.prefix + "changes" }
func (b *backend) epochKey() string       { return b.prefix + "epoch" }
func (b *backend) Now() time.Time         { return b.now() }

// OnNotify implements store.Backend.
func (b *backend) OnNotify(fn func(string)) { b.notify.Store(&fn) }
func (b *backend) fail(err error) error     { return store.Unavailable(fmt.Errorf("redisstore: %w", err)) }
func (b *backend) keys(ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = b.key(k)
	}
	return out
}

// Close releases the connection pool.
func (b *backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	return b.rdb.Close()
}

func values(raw []any) [][]byte {
	out := make([][]byte, len(raw))
	for i, v := range raw {
		if s, ok := v.(string); ok {
			out[i] = []byte(s)
		}
	}
	return out
}

// Read implements store.Backend with one MGET (atomic).
func (b *backend) Read(ctx context.Context, keys ...string) ([][]byte, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if len(keys) == 0 {
		return nil, nil
	}
	raw, err := b.rdb.MGet(ctx, b.keys(keys)...).Result()
	if err != nil {
		return nil, b.fail(err)
	}
	return values(raw), nil
}

// Members implements store.Backend.
func (b *backend) Members(ctx context.Context, set string) ([]string, error) {
	if b.closed.Load() {
		return nil, ErrClosed
	}
	m, err := b.rdb.SMembers(ctx, b.key(set)).Result()
	if err != nil {
		return nil, b.fail(err)
	}
	return m, nil
}

// epochScript creates the epoch (the server's time in ms) if absent and
// returns the stored one.
var epochScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
return redis.call('GET', KEYS[1])`)

// Epoch implements store.Backend: the keyspace's birth time.
func (b *backend) Epoch(ctx context.Context, create bool) (string, error) {
	if b.closed.Load() {
		return "", ErrClosed
	}
	var v string
	var err error
	if create {
		v, err = epochScript.Run(ctx, b.rdb, []string{b.epochKey()}).Text()
	} else {
		v, err = b.rdb.Get(ctx, b.epochKey()).Result()
	}
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", b.fail(err)
	}
	return v, nil
}

// insertScript: KEYS[1] epoch, KEYS[2] key; ARGV[1] notBefore (ms), ARGV[2]
// TTL (ms). Returns {1 when the key is new and now recorded, else 0; the
// epoch}. A missing epoch means the data was lost: it is re-created, so older
// proofs fail.
var insertScript = redis.NewScript(`
local e = redis.call('GET', KEYS[1])
if not e then
  local t = redis.call('TIME')
  e = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', KEYS[1], e)
end
if tonumber(ARGV[1]) < tonumber(e) then return {0, tostring(e)} end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return {1, tostring(e)} end
return {0, tostring(e)}`)

// DefaultEpochRecheck is how long InsertNew trusts the epoch it last read.
const DefaultEpochRecheck = time.Second

// epochMemo is the keyspace epoch as this process last read it. Every
// worker request inserts a nonce; reading the epoch each time tripled its
// cost in Redis commands (EVALSHA, GET, SET against one SET). Trusting the
// reading for a second is safe because a data loss erases the workers'
// credentials with the nonces: a replayed request is refused by its
// credential check (STORE_RESET) before its nonce matters, and the memo only
// covers the loss of the last second, which no credential survived either.
type epochMemo struct {
	mu      sync.Mutex
	ms      int64
	checked time.Time
}

func (m *epochMemo) get(now time.Time, maxAge time.Duration) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ms, !m.checked.IsZero() && now.Sub(m.checked) < maxAge && now.Sub(m.checked) >= 0
}

func (m *epochMemo) set(ms int64, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ms, m.checked = ms, now
}

// InsertNew implements store.Backend: SET NX PX, refused for a notBefore
// older than the keyspace. The epoch is read with the insert (one script)
// when the memo of it is older than epochRecheck; otherwise the insert is a
// plain SET NX PX.
func (b *backend) InsertNew(ctx context.Context, key string, ttl time.Duration, notBefore time.Time) (bool, error) {
	if b.closed.Load() {
		return false, ErrClosed
	}
	ttlMS := max(ttl.Milliseconds(), 1)
	now := b.now()
	if e, ok := b.epoch.get(now, b.epochRecheck); ok {
		if notBefore.UnixMilli() < e {
			return false, nil
		}
		ok, err := b.rdb.SetNX(ctx, b.key(key), "1", time.Duration(ttlMS)*time.Millisecond).Result()
		if err != nil {
			return false, b.fail(err)
		}
		return ok, nil
	}
	res, err := insertScript.Run(ctx, b.rdb, []string{b.epochKey(), b.key(key)}, notBefore.UnixMilli(), ttlMS).Slice()
	if err != nil {
		return false, b.fail(err)
	}
	if len(res) != 2 {
		return false, b.fail(fmt.Errorf("insert script answered %d values", len(res)))
	}
	inserted, _ := res[0].(int64)
	epoch, _ := res[1].(string)
	if e, perr := strconv.ParseInt(epoch, 10, 64); perr == nil {
		b.epoch.set(e, now)
	}
	return inserted == 1, nil
}

// Update implements store.Backend optimistically: fn reads with plain MGETs,
// and one script applies its writes only if every record it read is still
// as read (compared by SHA-1), else fn runs again. WATCH/MULTI/EXEC did the
// same with three more commands per transaction and two per extra read; a
// transaction that writes nothing is its reads alone.
func (b *backend) Update(ctx context.Context, fn func(store.Txn) error) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for attempt := range maxAttempts {
		t := &txn{b: b, ctx: ctx, now: b.now(), writes: map[string]*write{}, read: map[string]string{}}
		ferr := fn(t)
		if t.failed != nil {
			return t.failed
		}
		if cause, abort := store.IsAbort(ferr); abort {
			return cause
		}
		committed, err := t.commit()
		switch {
		case err != nil:
			if b.closed.Load() {
				return ErrClosed
			}
			if errors.Is(err, context.Canceled) {
				return err
			}
			return b.fail(err)
		case !committed:
			// Lost the race; back off a little, randomised so that two
			// replicas do not retry in lockstep.
			d := time.Duration(rand.IntN(1+min(attempt, 10))) * time.Millisecond
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		b.told(t)
		return ferr
	}
	return store.Unavailable(ErrContention)
}

// told gives a committed transaction's topics to this process's listener.
func (b *backend) told(t *txn) {
	if fn := b.notify.Load(); fn != nil && t != nil {
		for _, topic := range t.topics {
			(*fn)(topic)
		}
	}
}

type write struct {
	val []byte
	exp time.Time
}

// txn is one optimistic transaction.
type txn struct {
	b      *backend
	ctx    context.Context
	now    time.Time
	writes map[string]*write // nil: delete
	order  []string
	// read maps each record read (its Redis key) to the SHA-1 of the value
	// read ("" when absent), checked by the commit script; readOrder keeps
	// the script's arguments in a stable order.
	read      map[string]string
	readOrder []string
	ops       []setOp
	topics    []string
	// at maps a topic to the one replica it is for (NotifyAt).
	at     map[string]string
	failed error
}

// setOp is one set or sorted-set change of the commit: the script's
// operation name, the key and its arguments.
type setOp struct {
	op   string
	key  string
	args []string
}

func (t *txn) Get(keys ...string) ([][]byte, error) {
	out := make([][]byte, len(keys))
	var fetch []string
	var at []int
	for i, k := range keys {
		if w, ok := t.writes[k]; ok {
			if w != nil {
				out[i] = w.val
			}
			continue
		}
		fetch, at = append(fetch, t.b.key(k)), append(at, i)
	}
	if len(fetch) == 0 {
		return out, nil
	}
	raw, err := t.b.rdb.MGet(t.ctx, fetch...).Result()
	if err != nil {
		t.failed = t.b.fail(err)
		return nil, t.failed
	}
	for j, v := range values(raw) {
		out[at[j]] = v
		// A record read twice keeps its first reading: the commit checks
		// that one, so a change between the two readings is a conflict.
		if _, seen := t.read[fetch[j]]; !seen {
			t.read[fetch[j]] = digest(v)
			t.readOrder = append(t.readOrder, fetch[j])
		}
	}
	return out, nil
}

// digest is what the commit script compares: "" for an absent record.
func digest(v []byte) string {
	if v == nil {
		return ""
	}
	sum := sha1.Sum(v)
	return hex.EncodeToString(sum[:])
}

func (t *txn) set(key string, w *write) {
	if _, ok := t.writes[key]; !ok {
		t.order = append(t.order, key)
	}
	t.writes[key] = w
}

func (t *txn) Put(key string, value []byte, _ store.Class, expiresAt time.Time) {
	t.set(key, &write{val: value, exp: expiresAt})
}

func (t *txn) Delete(key string) { t.set(key, nil) }

func (t *txn) op(op, key string, args ...string) {
	t.ops = append(t.ops, setOp{op: op, key: t.b.key(key), args: args})
}

func (t *txn) SetAdd(set, member string)    { t.op("sadd", set, member) }
func (t *txn) SetRemove(set, member string) { t.op("srem", set, member) }

// NotifyAt implements store.Txn: published on that replica's own channel, or with the commit's broadcast
// (feedMessages).
func (t *txn) NotifyAt(replica, topic string) {
	if replica != "" {
		if t.at == nil {
			t.at = map[string]string{}
		}
		t.at[topic] = replica
	}
	t.Notify(topic)
}

func (t *txn) Notify(topic string) {
	if !slices.Contains(t.topics, topic) {
		t.topics = append(t.topics, topic)
	}
}
func (t *txn) Now() time.Time { return t.now }

// commitScript applies a transaction if what it read is unchanged.
// KEYS: the records read, then one key per write or set operation.
// ARGV[1]: how many records were read; then their digests (SHA-1 hex, ""
// for absent); then the operations, each a name and its arguments:
// set VALUE PX (PX 0: no expiry), del, sadd M, srem M, zadd SCORE M,
// zaddnx SCORE M, zrem M, zrembelow MAX ("(score"), pub CHANNEL MESSAGE
// (pub takes no key). Returns 1 when applied, 0 when a record changed.
var commitScript = redis.NewScript(`
local r = tonumber(ARGV[1])
if r > 0 then
  local cur = redis.call('MGET', unpack(KEYS, 1, r))
  for i = 1, r do
    local want, v = ARGV[1 + i], cur[i]
    if v then
      if want ~= redis.sha1hex(v) then return 0 end
    elseif want ~= '' then
      return 0
    end
  end
end
local k, a = r, r + 2
while a <= #ARGV do
  local op = ARGV[a]
  if op == 'pub' then
    redis.call('PUBLISH', ARGV[a + 1], ARGV[a + 2]); a = a + 3
  else
    k = k + 1
    local key = KEYS[k]
    if op == 'set' then
      if ARGV[a + 2] == '0' then redis.call('SET', key, ARGV[a + 1])
      else redis.call('SET', key, ARGV[a + 1], 'PX', ARGV[a + 2]) end
      a = a + 3
    elseif op == 'del' then redis.call('DEL', key); a = a + 1
    elseif op == 'sadd' then redis.call('SADD', key, ARGV[a + 1]); a = a + 2
    elseif op == 'srem' then redis.call('SREM', key, ARGV[a + 1]); a = a + 2
    elseif op == 'zadd' then redis.call('ZADD', key, ARGV[a + 1], ARGV[a + 2]); a = a + 3
    elseif op == 'zaddnx' then redis.call('ZADD', key, 'NX', ARGV[a + 1], ARGV[a + 2]); a = a + 3
    elseif op == 'zrem' then redis.call('ZREM', key, ARGV[a + 1]); a = a + 2
    elseif op == 'zrembelow' then redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[a + 1]); a = a + 2
    else return redis.error_reply('commit script: unknown operation ' .. tostring(op)) end
  end
end
return 1`)

// commit applies the writes, set operations and notifications with
// commitScript, reporting false when a record read changed meanwhile. A
// transaction that changes nothing and notifies nothing sends nothing.
func (t *txn) commit() (bool, error) {
	if len(t.order) == 0 && len(t.ops) == 0 && len(t.topics) == 0 {
		return true, nil
	}
	keys := slices.Clone(t.readOrder)
	args := []any{len(t.readOrder)}
	for _, k := range t.readOrder {
		args = append(args, t.read[k])
	}
	for _, k := range t.order {
		w := t.writes[k]
		keys = append(keys, t.b.key(k))
		switch {
		case w == nil:
			args = append(args, "del")
		case w.exp.IsZero():
			args = append(args, "set", w.val, 0)
		case w.exp.Sub(t.now) < time.Millisecond:
			// Already expired: the record is gone.
			args = append(args, "del")
		default:
			args = append(args, "set", w.val, w.exp.Sub(t.now).Milliseconds())
		}
	}
	for _, o := range t.ops {
		keys = append(keys, o.key)
		args = append(args, o.op)
		for _, a := range o.args {
			args = append(args, a)
		}
	}
	for _, m := range feedMessages(t.b.changesChannel(), t.b.origin, t.topics, t.at) {
		args = append(args, "pub", m.channel, m.payload)
	}
	n, err := commitScript.Run(t.ctx, t.b.rdb, keys, args...).Int()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// ZAdd implements store.Txn: ZADD (NX with keep) in the commit.
func (t *txn) ZAdd(key, member string, score float64, keep bool) {
	op := "zadd"
	if keep {
		op = "zaddnx"
	}
	t.op(op, key, strconv.FormatFloat(score, 'f', -1, 64), member)
}

// ZRem implements store.Txn.
func (t *txn) ZRem(key, member string) { t.op("zrem", key, member) }

// ZRemBelow implements store.Txn: ZREMRANGEBYSCORE key -inf (score.
func (t *txn) ZRemBelow(key string, score float64) {
	t.op("zrembelow", key, "("+strconv.FormatFloat(score, 'f', -1, 64))
}

// ZPopMin implements store.Backend.
func (b *backend) ZPopMin(ctx context.Context, key string) (string, bool, error) {
	if b.closed.Load() {
		return "", false, ErrClosed
	}
	zs, err := b.rdb.ZPopMin(ctx, b.key(key)).Result()
	if err != nil {
		return "", false, b.fail(err)
	}
	if len(zs) == 0 {
		return "", false, nil
	}
	m, _ := zs[0].Member.(string)
	return m, true, nil
}

// ZFirst implements store.Backend.
func (b *backend) ZFirst(ctx context.Context, key string) (string, bool, error) {
	if b.closed.Load() {
		return "", false, ErrClosed
	}
	ms, err := b.rdb.ZRange(ctx, b.key(key), 0, 0).Result()
	if err != nil {
		return "", false, b.fail(err)
	}
	if len(ms) == 0 {
		return "", false, nil
	}
	return ms[0], true, nil
}

// ZCount implements store.Backend.
func (b *backend) ZCount(ctx context.Context, key string, min float64) (int, error) {
	if b.closed.Load() {
		return 0, ErrClosed
	}
	n, err := b.rdb.ZCount(ctx, b.key(key), strconv.FormatFloat(min, 'f', -1, 64), "+inf").Result()
	if err != nil {
		return 0, b.fail(err)
	}
	return int(n), nil
}
