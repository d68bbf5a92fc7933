package sandbox

import (
	"fmt"
	"os"
	"sync"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
)

// groupPoolSize is how many run cgroups (each with its first block's child
// group) are kept made ahead of need. Creating them is ≈ 0.5–1 ms of
// mkdirs and limit writes per run on cgroup v1, which a request otherwise
// pays before its first block can start. Two cover a burst of concurrent
// requests between refills; an idle server holds two empty groups.
const groupPoolSize = 2

// groupPool hands out fresh, never-used run groups with the Sandbox's
// default limits. A group is taken by exactly one run and removed when that
// run closes, like one made on demand; the pool only moves its creation off
// the request path. Groups left in the pool when the process exits are
// empty and named like every run group, so the next start's sweep removes
// them.
type groupPool struct {
	mu      sync.Mutex
	ready   []pooledGroup
	filling bool
	fills   sync.WaitGroup // the refill goroutine, for tests
}

type pooledGroup struct {
	name        string
	run, block1 *cgroup.Group
}

// take returns a pooled group for limits lim, or ok false when none is
// ready or lim is not the Sandbox's default (a run with its own limits
// makes its group itself). Every take starts a refill.
func (s *Sandbox) takeGroup(lim cgroup.Limits) (pg pooledGroup, ok bool) {
	gp := s.plat.pool
	if gp == nil || s.plat.cg == nil || lim != s.poolLimits() {
		return pooledGroup{}, false
	}
	gp.mu.Lock()
	if n := len(gp.ready); n > 0 {
		pg, ok = gp.ready[n-1], true
		gp.ready = gp.ready[:n-1]
	}
	start := !gp.filling
	gp.filling = true
	if start {
		gp.fills.Add(1)
	}
	gp.mu.Unlock()
	if start {
		go s.refillGroups()
	}
	return pg, ok
}

func (s *Sandbox) poolLimits() cgroup.Limits {
	return cgroup.Limits{Memory: s.cfg.Limits.Memory, Pids: s.cfg.Limits.Pids}
}

// refillGroups creates groups until the pool is full, then ends. A failure
// ends it too: the next take tries again, and NewRun falls back to making
// its group itself, which reports the error.
func (s *Sandbox) refillGroups() {
	gp := s.plat.pool
	defer gp.fills.Done()
	for {
		gp.mu.Lock()
		if len(gp.ready) >= groupPoolSize {
			gp.filling = false
			gp.mu.Unlock()
			return
		}
		gp.mu.Unlock()
		pg, err := s.newPooledGroup()
		gp.mu.Lock()
		if err != nil {
			gp.filling = false
			gp.mu.Unlock()
			s.log.Debug("sandbox: making a run cgroup ahead of need failed", "err", err)
			return
		}
		gp.ready = append(gp.ready, pg)
		gp.mu.Unlock()
	}
}

func (s *Sandbox) newPooledGroup() (pooledGroup, error) {
	name := fmt.Sprintf("codellm-%d-%s-%d", os.Getpid(), instanceID(), runSeq.Add(1))
	g, err := s.plat.cg.NewGroup(name, s.poolLimits())
	if err != nil {
		return pooledGroup{}, err
	}
	c, err := g.NewChild("block-1")
	if err != nil {
		_ = g.Remove()
		return pooledGroup{}, err
	}
	return pooledGroup{name: name, run: g, block1: c}, nil
}

// Settle waits until the Sandbox's background cgroup work — removing
// closed runs' groups, refilling the pool — has finished. Nothing needs it
// for correctness; tests that count descriptors or cgroup directories call
// it first, since that work opens and closes descriptors of its own.
func (s *Sandbox) Settle() {
	if s.plat.removals != nil {
		s.plat.removals.Wait()
	}
	if s.plat.pool != nil {
		s.plat.pool.fills.Wait()
	}
}
