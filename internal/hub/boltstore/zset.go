package boltstore

import (
	"context"
	"slices"
	"strings"
)

// zset is an in-memory sorted set (Volatile, like the embedded store's sets): members by score, ties by
// member, as Redis orders them.
type zset struct {
	score map[string]float64
	order []zentry // sorted
}

type zentry struct {
	score  float64
	member string
}

func zcmp(a, b zentry) int {
	switch {
	case a.score < b.score:
		return -1
	case a.score > b.score:
		return 1
	}
	return strings.Compare(a.member, b.member)
}

func (z *zset) add(member string, score float64, keep bool) {
	if old, ok := z.score[member]; ok {
		if keep || old == score {
			return
		}
		z.remove(member)
	}
	z.score[member] = score
	e := zentry{score, member}
	i, _ := slices.BinarySearchFunc(z.order, e, zcmp)
	z.order = slices.Insert(z.order, i, e)
}

func (z *zset) remove(member string) {
	score, ok := z.score[member]
	if !ok {
		return
	}
	delete(z.score, member)
	if i, found := slices.BinarySearchFunc(z.order, zentry{score, member}, zcmp); found {
		z.order = slices.Delete(z.order, i, i+1)
	}
}

func (z *zset) removeBelow(score float64) {
	i := 0
	for i < len(z.order) && z.order[i].score < score {
		delete(z.score, z.order[i].member)
		i++
	}
	z.order = slices.Delete(z.order, 0, i)
}

// zsetOp is one sorted-set write of a transaction, applied with the commit.
type zsetOp struct {
	key, member string
	score       float64
	kind        byte // 'a' add, 'k' add keeping an existing score, 'r' remove, 'b' remove below
}

func (t *txn) ZAdd(key, member string, score float64, keep bool) {
	kind := byte('a')
	if keep {
		kind = 'k'
	}
	t.zsetOps = append(t.zsetOps, zsetOp{key: key, member: member, score: score, kind: kind})
}
func (t *txn) ZRem(key, member string) {
	t.zsetOps = append(t.zsetOps, zsetOp{key: key, member: member, kind: 'r'})
}
func (t *txn) ZRemBelow(key string, score float64) {
	t.zsetOps = append(t.zsetOps, zsetOp{key: key, score: score, kind: 'b'})
}

// applyZ applies a committed transaction's sorted-set writes (b.mu held).
func (b *backend) applyZ(ops []zsetOp) {
	for _, op := range ops {
		z := b.zsets[op.key]
		if z == nil {
			if op.kind == 'r' || op.kind == 'b' {
				continue
			}
			z = &zset{score: map[string]float64{}}
			b.zsets[op.key] = z
		}
		switch op.kind {
		case 'a', 'k':
			z.add(op.member, op.score, op.kind == 'k')
		case 'r':
			z.remove(op.member)
		case 'b':
			z.removeBelow(op.score)
		}
		if len(z.order) == 0 {
			delete(b.zsets, op.key)
		}
	}
}

// ZPopMin implements store.Backend.
func (b *backend) ZPopMin(ctx context.Context, key string) (string, bool, error) {
	if err := b.begin(ctx); err != nil {
		return "", false, err
	}
	defer b.mu.Unlock()
	z := b.zsets[key]
	if z == nil || len(z.order) == 0 {
		return "", false, nil
	}
	m := z.order[0].member
	z.remove(m)
	if len(z.order) == 0 {
		delete(b.zsets, key)
	}
	return m, true, nil
}

// ZFirst implements store.Backend.
func (b *backend) ZFirst(ctx context.Context, key string) (string, bool, error) {
	if err := b.begin(ctx); err != nil {
		return "", false, err
	}
	defer b.mu.Unlock()
	if z := b.zsets[key]; z != nil && len(z.order) > 0 {
		return z.order[0].member, true, nil
	}
	return "", false, nil
}

// ZCount implements store.Backend.
func (b *backend) ZCount(ctx context.Context, key string, min float64) (int, error) {
	if err := b.begin(ctx); err != nil {
		return 0, err
	}
	defer b.mu.Unlock()
	z := b.zsets[key]
	if z == nil {
		return 0, nil
	}
	i, _ := slices.BinarySearchFunc(z.order, zentry{score: min}, zcmp)
	return len(z.order) - i, nil
}
