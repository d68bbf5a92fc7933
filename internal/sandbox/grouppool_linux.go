package sandbox

import (
	"fmt"
	"os"
	"sync"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
)

// groupPoolSize is how many run cgroups are kept made ahead of need.
// Creating them is ≈ 0.5–1 ms of mkdirs and limit writes per run on cgroup
// v1, which a request otherwise pays before its first block can start. Two cover a burst of concurrent
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
	closed  bool           // Sandbox.Close: no more refills
	fills   sync.WaitGroup // the refill goroutine, for tests
}

type pooledGroup struct {
	name string
	run  *cgroup.Group
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
	if gp.closed {
		gp.mu.Unlock()
		return pooledGroup{}, false
	}
	if n := len(gp.ready); n > 0 {
		pg, ok = gp.ready[n-1], true
		gp.ready = gp.ready[:n-1]
	}
	gp.mu.Unlock()
	s.startRefill()
	return pg, ok
}

// startRefill starts the refill goroutine unless it runs already.
func (s *Sandbox) startRefill() {
	gp := s.plat.pool
	gp.mu.Lock()
	start := !gp.filling && !gp.closed
	gp.filling = true
	if start {
		gp.fills.Add(1)
	}
	gp.mu.Unlock()
	if start {
		go s.refillGroups()
	}
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
		if len(gp.ready) >= groupPoolSize || gp.closed {
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
	g, err := s.plat.newGroup(name, s.poolLimits())
	if err != nil {
		return pooledGroup{}, err
	}
	// Most runs start one block (Run.OneBlock), which runs in g itself; a
	// run of more makes its blocks' groups as it starts them.
	return pooledGroup{name: name, run: g}, nil
}

// Close drains what the Sandbox made ahead of need: pooled run groups are
// removed, and no more are made; its spawners end. Runs
// already created are unaffected and new ones make their groups on demand.
// It returns once closed runs' groups are removed too (see Settle).
func (s *Sandbox) Close() error {
	if s.plat.spawner != nil {
		defer s.plat.spawner.close()
	}
	gp := s.plat.pool
	if gp == nil {
		return nil
	}
	gp.mu.Lock()
	gp.closed = true
	gp.mu.Unlock()
	gp.fills.Wait()
	gp.mu.Lock()
	ready := gp.ready
	gp.ready = nil
	gp.mu.Unlock()
	var first error
	for _, pg := range ready {
		if err := pg.run.Remove(); err != nil && first == nil {
			first = fmt.Errorf("sandbox: remove pooled run cgroup: %w", err)
		}
	}
	s.Settle()
	return first
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
